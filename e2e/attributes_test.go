package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

const e2eWriteToken = "e2e-attribute-write-token"

// attrTruth is what the attribute test sent: events and versions.
type attrTruth struct {
	events   []attrEvent
	versions []attrVer
}

type attrEvent struct {
	dev   string
	at    time.Time
	value float64
}

type attrVer struct {
	dev, site string
	from      time.Time
}

// sites is the brute-force join: 1m windows' count and sum per site.
func (tr *attrTruth) sites() map[string]string {
	type acc struct {
		n   int
		sum float64
	}
	m := map[string]*acc{}
	for _, e := range tr.events {
		site, best := "", time.Time{}
		for _, v := range tr.versions {
			if v.dev == e.dev && !v.from.After(e.at) && !v.from.Before(best) {
				site, best = v.site, v.from
			}
		}
		k := e.at.UTC().Truncate(time.Minute).Format(time.RFC3339) + " " + site
		if m[k] == nil {
			m[k] = &acc{}
		}
		m[k].n++
		m[k].sum += e.value
	}
	out := map[string]string{}
	for k, a := range m {
		out[k] = fmt.Sprintf("n=%d sum=%g", a.n, a.sum)
	}
	return out
}

// hubSites asks hubd for group_by=attr.site over the test's hour.
func hubSites(t *testing.T, h *hubProc, base time.Time) map[string]string {
	t.Helper()
	q := "/v1/aggregates?" + url.Values{"metric": {"temp"}, "window": {"1m"}, "group_by": {"attr.site"}, "aggs": {"count,sum"},
		"from": {base.Add(-time.Hour).Format(time.RFC3339)}, "to": {base.Add(time.Hour).Format(time.RFC3339)}}.Encode()
	var r struct {
		Windows []struct {
			Start string            `json:"start"`
			Group map[string]string `json:"group"`
			Count uint64            `json:"count"`
			Sum   float64           `json:"sum"`
		} `json:"windows"`
	}
	if err := json.Unmarshal(get(t, h, q), &r); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, w := range r.Windows {
		out[w.Start+" "+w.Group["attr.site"]] = fmt.Sprintf("n=%d sum=%g", w.Count, w.Sum)
	}
	return out
}

// putSite writes one version through hubd's API with the write token.
func putSite(t *testing.T, h *hubProc, tr *attrTruth, dev, site string, from time.Time) {
	t.Helper()
	body := fmt.Sprintf(`{"attributes":{"site":%q,"model":"x1"},"effective_from":%d}`, site, from.UnixMilli())
	req, _ := http.NewRequest("PUT", "http://"+h.httpAddr+"/v1/devices/"+dev+"/attributes", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e2eWriteToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("PUT attributes of %s: %s %s", dev, resp.Status, b)
	}
	tr.versions = append(tr.versions, attrVer{dev, site, from})
}

// waitSites polls hubd until its answer equals the brute-force join.
func waitSites(t *testing.T, h *hubProc, base time.Time, tr *attrTruth, step string) {
	t.Helper()
	want := tr.sites()
	var got map[string]string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = hubSites(t, h, base); fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
	}
	t.Fatalf("%s: group_by=attr.site\n got %v\nwant %v", step, got, want)
}

// TestAttributesThroughBinaries: through the real hubd binary and its
// embedded broker, pump-1 moves from site north to south at a known time
// and sends events from both sides, some from before the move only after
// it; pump-2's site is corrected retroactively after its events arrived;
// hubd is SIGKILLed and restarted in between, then stopped and rebuilt
// with `hubd rebuild`. group_by=attr.site equals the brute-force join of
// every event with the version in force at its event time at each step.
func TestAttributesThroughBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hubd")
	}
	h := startHubWith(t, "--http-write-token", e2eWriteToken, "--checkpoint-interval", "1s")
	dataDir := h.args[1]
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.brokerURL).SetClientID("e2e-attrs").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer func() { c.Disconnect(100) }()
	tr := &attrTruth{}
	seqs := map[string]uint64{}
	ids := map[string]wire.StreamID{"pump-1": wire.NewStreamID(), "pump-2": wire.NewStreamID()}
	base := time.Now().UTC().Truncate(time.Minute).Add(-40 * time.Minute)
	move := base.Add(10 * time.Minute)
	publish := func(dev string, offsets ...time.Duration) {
		t.Helper()
		id := ids[dev]
		b := &wirepb.Batch{DeviceId: dev, StreamId: id[:], FirstSeq: seqs[dev] + 1, SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for _, off := range offsets {
			seqs[dev]++
			v := float64(seqs[dev])
			b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: v, DeviceTimeNs: base.Add(off).UnixNano(),
				MonoNs: int64(seqs[dev]), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP, UncertaintyNs: int64(time.Millisecond)})
			tr.events = append(tr.events, attrEvent{dev, base.Add(off), v})
		}
		payload, err := wire.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if tok := c.Publish(wire.BatchTopic(dev), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
		waitApplied(t, h, dev, seqs[dev])
	}

	putSite(t, h, tr, "pump-1", "north", base)
	putSite(t, h, tr, "pump-2", "north", base)
	publish("pump-1", time.Minute, 2*time.Minute, 3*time.Minute+10*time.Second)
	publish("pump-2", time.Minute, 6*time.Minute, 12*time.Minute)
	putSite(t, h, tr, "pump-1", "south", move) // the move, at a known time
	publish("pump-1", 11*time.Minute, 13*time.Minute)
	publish("pump-1", 9*time.Minute, 9*time.Minute+40*time.Second) // from before the move, sent after it
	waitSites(t, h, base, tr, "after the move")

	h.kill() // SIGKILL
	h.start()
	waitSites(t, h, base, tr, "after SIGKILL and restart")

	// pump-2 was at east from minute 5: a correction after its events.
	putSite(t, h, tr, "pump-2", "east", base.Add(5*time.Minute))
	publish("pump-2", 4*time.Minute, 8*time.Minute)
	waitSites(t, h, base, tr, "after the retroactive correction")

	h.kill()
	h.start()
	waitSites(t, h, base, tr, "after the second SIGKILL")

	// Enrichment: pump-1's stored events carry their site as of their time.
	var evs struct {
		Events []struct {
			TimeMs     int64             `json:"time_ms"`
			Attributes map[string]string `json:"attributes"`
		} `json:"events"`
	}
	if err := json.Unmarshal(get(t, h, fmt.Sprintf("/v1/events?device=pump-1&from=%d&to=%d", base.UnixMilli(), base.Add(time.Hour).UnixMilli())), &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Events {
		if want := map[bool]string{true: "north", false: "south"}[e.TimeMs < move.UnixMilli()]; e.Attributes["site"] != want {
			t.Fatalf("event at %d ms carries %v, want site %s", e.TimeMs, e.Attributes, want)
		}
	}

	// Stop hubd, rebuild its aggregates from the log, start it again.
	h.cmd.Process.Signal(syscall.SIGTERM)
	h.cmd.Wait()
	out, err := exec.Command(h.bin, "rebuild", "--data-dir", dataDir, "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("hubd rebuild: %v: %s", err, out)
	}
	h.start()
	waitSites(t, h, base, tr, "after hubd rebuild")
}
