package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestHeavyQueriesBounded loads hubd with many series (devices × values of
// one tag) and fires rounds of concurrent heavy queries at it, half over
// max_query_results, half within it but slow: every query over the cap is
// refused with a 400 naming the cap before any work (the hub's own
// counter of refusals before work says so, none during), queries beyond
// http-max-queries get 429 with Retry-After (counted), /metrics and
// /healthz answer throughout, and the process' peak RSS grows by little.
func TestHeavyQueriesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hubd")
	}
	const (
		devices   = 40
		perDevice = 500 // series per device: values of tag k
		limit     = 2000
		conc      = 16
	)
	t.Setenv("HUBD_HTTP_MAX_QUERIES", "2")
	t.Setenv("HUBD_HTTP_QUERY_WAIT", "1ms")
	t.Setenv("HUBD_AGGREGATE_MAX_QUERY_RESULTS", strconv.Itoa(limit))
	h := startHub(t, filepath.Join(t.TempDir(), "hub"), "")
	base := time.Now().Add(-8 * time.Minute).Truncate(time.Minute)
	publishSeries(t, h.brokerURL, base, devices, perDevice)
	from, to := base.Add(-10*time.Minute).UnixMilli(), base.Add(20*time.Minute).UnixMilli()
	count := fmt.Sprintf("/v1/aggregates?metric=load&window=tumbling:1m&aggs=count&from=%d&to=%d", from, to)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var r struct{ Windows []struct{ Count int } }
		code, body := httpGet(t, h, count)
		n := 0
		if code == 200 && json.Unmarshal(body, &r) == nil {
			for _, w := range r.Windows {
				n += w.Count
			}
		}
		if n == devices*perDevice {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub holds %d of %d events (last answer %d %s)", n, devices*perDevice, code, body)
		}
	}
	// Each series holds one event, so 5 hopping windows: 100,000 windows
	// grouped by series, far over the cap; about 10 without grouping.
	over := fmt.Sprintf("/v1/aggregates?metric=load&window=hopping:5m/1m&group_by=device,k&from=%d&to=%d", from, to)
	within := fmt.Sprintf("/v1/aggregates?metric=load&window=hopping:5m/1m&from=%d&to=%d", from, to)
	before := scrape(t, h)
	hwm0 := peakRSS(t, h)

	// The two query slots go to whichever queries reach them first, so a
	// round may answer every over-cap query 429; rounds repeat until all
	// three answers were seen.
	var refused, busy, ok int
	for round := 0; round < 40 && (busy == 0 || refused == 0 || ok == 0); round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := 0; i < conc; i++ {
			wg.Add(1)
			go func(heavyOver bool) {
				defer wg.Done()
				path := within
				if heavyOver {
					path = over
				}
				resp, err := http.Get("http://" + h.httpAddr + path)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				var e struct {
					Error, Limit string
					Max          int
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case resp.StatusCode == 429:
					if resp.Header.Get("Retry-After") == "" || json.Unmarshal(body, &e) != nil || e.Limit != "http-max-queries" || e.Max != 2 {
						t.Errorf("429 without Retry-After or the JSON error: %q %s", resp.Header.Get("Retry-After"), body)
					}
					busy++
				case heavyOver && resp.StatusCode == 400:
					if json.Unmarshal(body, &e) != nil || e.Limit != "max_query_results" || e.Max != limit {
						t.Errorf("400 not naming max_query_results=%d: %s", limit, body)
					}
					refused++
				case !heavyOver && resp.StatusCode == 200:
					ok++
				default:
					t.Errorf("over the cap %v: %d %s", heavyOver, resp.StatusCode, body)
				}
			}(i%2 == 0)
		}
		// Cheap endpoints answer while the queries run.
		for _, p := range []string{"/metrics", "/healthz", "/v1/devices/dev-000"} {
			if code, body := httpGet(t, h, p); code != 200 {
				t.Errorf("%s during heavy queries: %d %s", p, code, body)
			}
		}
		wg.Wait()
	}
	after := scrape(t, h)
	hwm1 := peakRSS(t, h)
	t.Logf("%d refused at the cap, %d answered 429, %d answered; peak RSS %d -> %d MiB", refused, busy, ok, hwm0>>20, hwm1>>20)
	if busy == 0 {
		t.Fatal("no query was answered 429: concurrent queries are not bounded")
	}
	if refused == 0 || ok == 0 {
		t.Fatalf("refused %d, answered %d: the mix was not exercised", refused, ok)
	}
	busyKey := `edgeflow_hub_http_queries_busy_total{endpoint="/v1/aggregates"}`
	beforeKey := `edgeflow_hub_http_queries_refused_total{endpoint="/v1/aggregates",limit="max_query_results",when="before"}`
	duringKey := `edgeflow_hub_http_queries_refused_total{endpoint="/v1/aggregates",limit="max_query_results",when="during"}`
	if d := after[busyKey] - before[busyKey]; d != float64(busy) {
		t.Errorf("%s grew by %v, %d answered 429", busyKey, d, busy)
	}
	if d := after[beforeKey] - before[beforeKey]; d != float64(refused) {
		t.Errorf("%s grew by %v, %d refused: a query over the cap was computed", beforeKey, d, refused)
	}
	if d := after[duringKey] - before[duringKey]; d != 0 {
		t.Errorf("%s grew by %v", duringKey, d)
	}
	// A generous bound: before the fix the over-cap queries alone built
	// thousands of windows and a group per series each.
	if hwm0 > 0 && hwm1-hwm0 > 256<<20 {
		t.Errorf("peak RSS grew by %d MiB during the queries", (hwm1-hwm0)>>20)
	}
}

// publishSeries sends, for each device, one batch of perDevice events of
// metric "load", each with its own value of tag k (one series each),
// spread over five minutes from base.
func publishSeries(t *testing.T, broker string, base time.Time, devices, perDevice int) {
	c := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID("e2e-heavy").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	for d := 0; d < devices; d++ {
		dev := fmt.Sprintf("dev-%03d", d)
		id := wire.NewStreamID()
		b := &wirepb.Batch{DeviceId: dev, StreamId: id[:], FirstSeq: 1, SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for i := 0; i < perDevice; i++ {
			ts := base.Add(time.Duration(i%60) * 5 * time.Second)
			b.Events = append(b.Events, &wirepb.Event{Metric: "load", Value: float64(i), DeviceTimeNs: ts.UnixNano(),
				Tags: []*wirepb.Tag{{Key: "k", Value: strconv.Itoa(i)}}, MonoNs: int64(i), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
		}
		payload, err := wire.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if tok := c.Publish(wire.BatchTopic(dev), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
}

func httpGet(t *testing.T, h *hubProc, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + h.httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// scrape reads hubd's /metrics into series -> value.
func scrape(t *testing.T, h *hubProc) map[string]float64 {
	t.Helper()
	_, body := httpGet(t, h, "/metrics")
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// peakRSS is hubd's peak resident set (VmHWM) in bytes; 0 where /proc
// does not say.
func peakRSS(t *testing.T, h *hubProc) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
