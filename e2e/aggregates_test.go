package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestAggregatesThroughHubd runs hubd as a process, publishes batches of
// three devices through its embedded broker, and checks GET /v1/aggregates
// against a brute-force computation of what was sent; then one device
// sends late events into final windows (revision 1, late 10), hubd is
// killed with SIGKILL and restarted, and every answer is byte-identical.
func TestAggregatesThroughHubd(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hubd")
	}
	t.Setenv("HUBD_AGGREGATE_IDLE_TIMEOUT", "1500ms")
	t.Setenv("HUBD_AGGREGATE_EVICT_AFTER", "1m")
	t.Setenv("HUBD_TICK_INTERVAL", "100ms")
	h := startHub(t, filepath.Join(t.TempDir(), "hub"), "")
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.brokerURL).SetClientID("e2e-agg").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Minute)
	sums := map[string]*agg{} // device|window start ms
	streams := map[string]wire.StreamID{}
	send := func(dev string, first uint64, secs []float64) {
		if _, ok := streams[dev]; !ok {
			streams[dev] = wire.NewStreamID()
		}
		id := streams[dev]
		b := &wirepb.Batch{DeviceId: dev, StreamId: id[:], FirstSeq: first, SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for i, s := range secs {
			ts := base.Add(time.Duration(s * float64(time.Second)))
			v := float64((int(first)+i)%17) * 1.5
			b.Events = append(b.Events, &wirepb.Event{Metric: "load", Value: v, DeviceTimeNs: ts.UnixNano(),
				MonoNs: int64(first) + int64(i), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
			k := fmt.Sprintf("%s|%d", dev, ts.Truncate(time.Minute).UnixMilli())
			if sums[k] == nil {
				sums[k] = &agg{Min: math.Inf(1), Max: math.Inf(-1)}
			}
			sums[k].add(v)
		}
		payload, err := wire.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if tok := c.Publish(wire.BatchTopic(dev), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	devs := []string{"pump-1", "pump-2", "fan-3"}
	for round := 0; round < 6; round++ {
		for _, d := range devs {
			secs := make([]float64, 40)
			for i := range secs {
				secs[i] = float64(round*40 + i)
			}
			send(d, uint64(round*40+1), secs)
		}
	}
	q := fmt.Sprintf("/v1/aggregates?metric=load&window=tumbling:1m&group_by=device&from=%d&to=%s",
		base.UnixMilli(), base.Add(time.Hour).Format(time.RFC3339))
	waitAggregates(t, h, q, sums, 0)
	late := make([]float64, 10)
	for i := range late {
		late[i] = 60 + float64(i)*0.25 // the second minute, long final
	}
	send("pump-2", 241, late)
	waitAggregates(t, h, q, sums, 1)
	qs := []string{q, q + "&aggs=count,p50,p99", fmt.Sprintf("/v1/aggregates?metric=load&window=hopping:2m/1m&from=%d&to=%d",
		base.UnixMilli(), base.Add(time.Hour).UnixMilli())}
	before := make([][]byte, len(qs))
	for i, q := range qs {
		before[i] = get(t, h, q)
	}
	h.kill()
	h.start()
	for i, q := range qs {
		if after := get(t, h, q); !bytes.Equal(before[i], after) {
			t.Fatalf("after SIGKILL, %s differs:\nbefore %s\nafter  %s", q, before[i], after)
		}
	}
}

// agg is a brute-force window.
type agg struct {
	Count         uint64
	Sum, Min, Max float64
}

func (a *agg) add(v float64) {
	a.Count++
	a.Sum += v
	a.Min, a.Max = math.Min(a.Min, v), math.Max(a.Max, v)
}

type aggWindow struct {
	StartMs  int64             `json:"start_ms"`
	Group    map[string]string `json:"group"`
	Count    uint64            `json:"count"`
	Sum      float64           `json:"sum"`
	Min      float64           `json:"min"`
	Max      float64           `json:"max"`
	Avg      float64           `json:"avg"`
	Final    bool              `json:"final"`
	Revision uint64            `json:"revision"`
	Late     uint64            `json:"late"`
}

// waitAggregates polls q until its windows equal the brute-force sums, all
// final, with revisions windows revised once.
func waitAggregates(t *testing.T, h *hubProc, q string, want map[string]*agg, revisions int) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		body := get(t, h, q)
		var r struct{ Windows []aggWindow }
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		last = compare(r.Windows, want, revisions)
		if last == "" {
			return body
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("aggregates never matched: %s", last)
	return nil
}

func compare(ws []aggWindow, want map[string]*agg, revisions int) string {
	if len(ws) != len(want) {
		return fmt.Sprintf("%d windows, want %d", len(ws), len(want))
	}
	revised := 0
	for _, w := range ws {
		b := want[fmt.Sprintf("%s|%d", w.Group["device"], w.StartMs)]
		switch {
		case b == nil:
			return fmt.Sprintf("unexpected window %+v", w)
		case w.Count != b.Count || w.Sum != b.Sum || w.Min != b.Min || w.Max != b.Max || w.Avg != b.Sum/float64(b.Count):
			return fmt.Sprintf("window %+v, want %+v", w, *b)
		case !w.Final:
			return fmt.Sprintf("window %+v not final", w)
		}
		if w.Revision > 0 {
			if w.Revision != 1 || w.Late != 10 {
				return fmt.Sprintf("revised window %+v", w)
			}
			revised++
		}
	}
	if revised != revisions {
		return fmt.Sprintf("%d windows revised, want %d", revised, revisions)
	}
	return ""
}

func get(t *testing.T, h *hubProc, path string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + h.httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	return b
}
