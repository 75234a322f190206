package hub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"edgeflow/hub/api"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/rules"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// minuteStats are the count and mean of one device's 1m window.
type minuteStats struct {
	count int
	sum   float64
}

func bruteMinutes(sent []sentEvent) map[string]map[int64]*minuteStats {
	out := map[string]map[int64]*minuteStats{}
	for _, e := range sent {
		start := e.t - e.t%int64(time.Minute)
		if out[e.device] == nil {
			out[e.device] = map[int64]*minuteStats{}
		}
		m := out[e.device][start]
		if m == nil {
			m = &minuteStats{}
			out[e.device][start] = m
		}
		m.count++
		m.sum += e.value
	}
	return out
}

// expectedFiring is the brute-force firing set of the two rules.
func expectedFiring(sent []sentEvent, warm float64) map[string]bool {
	want := map[string]bool{}
	for dev, ms := range bruteMinutes(sent) {
		for start, m := range ms {
			if m.count > 70 {
				want[fmt.Sprintf("crowd/device=%s/%d", dev, start)] = true
			}
			if m.sum/float64(m.count) > warm {
				want[fmt.Sprintf("warm/device=%s/%d", dev, start)] = true
			}
		}
	}
	return want
}

// waitAlerts polls /v1/alerts until its firing set is want and returns
// the raw answer.
func waitAlerts(t *testing.T, s *Server, want map[string]bool) (api.AlertsResponse, []byte) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var r api.AlertsResponse
		code, body := getJSON(t, s.Handler(), "/v1/alerts?limit=10000", &r)
		if code != 200 {
			t.Fatalf("/v1/alerts: %d %s", code, body)
		}
		got := map[string]bool{}
		for _, a := range r.Alerts {
			if a.State == rules.Firing {
				got[a.ID] = true
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return r, body
		}
		if time.Now().After(deadline) {
			t.Fatalf("firing alerts\n got  %v\n want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRulesThroughHub: threshold rules over real batches through the
// embedded broker; a late batch pushes one final window over a rule and
// pulls one back under another; a crash after it (no final checkpoint)
// and a restart that replays the log list the same alerts with the same
// ids, revisions and fired_at.
func TestRulesThroughHub(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	d1Minute2 := base.Add(2 * time.Minute).UnixNano()

	// The warm threshold lies between d1's third-minute mean before and
	// after its late events.
	var pre []sentEvent
	for i := 120; i < 180; i++ {
		pre = append(pre, sentEvent{"d1", base.Add(time.Duration(i) * time.Second).UnixNano(), float64((i*7+2*13)%101) - 20})
	}
	before := bruteMinutes(pre)["d1"][d1Minute2]
	var late []sentEvent
	for i := 0; i < 20; i++ {
		late = append(late, sentEvent{"d1", base.Add(2*time.Minute + time.Duration(i)*time.Second + 500*time.Millisecond).UnixNano(), float64(i)})
	}
	after := bruteMinutes(append(pre, late...))["d1"][d1Minute2]
	warm := (before.sum/float64(before.count) + after.sum/float64(after.count)) / 2

	rs, err := rules.ParseYAML(fmt.Appendf(nil, `
rules:
  - {name: crowd, metric: temp, window: "tumbling:1m", agg: count, op: ">", value: 70, group_by: [device]}
  - {name: warm, metric: temp, window: "tumbling:1m", agg: avg, op: ">", value: %v, group_by: [device]}
`, warm))
	if err != nil {
		t.Fatal(err)
	}
	opts := func() Options {
		o := aggTestOptions(t, dir)
		o.Rules = rs
		return o
	}
	s1 := startHub(t, opts())
	var devs []*device
	for _, id := range []string{"d1", "d22"} {
		devs = append(devs, newDevice(t, "tcp://"+s1.BrokerAddr(), id))
	}
	sent := sendFleet(t, devs, base, 300)
	waitCount(t, s1, base, uint64(len(sent)))
	waitAlerts(t, s1, expectedFiring(sent, warm))
	if err := s1.Checkpoint(); err != nil {
		t.Fatal(err)
	}

	d := devs[0]
	var times []int64
	var vals []float64
	for _, e := range late {
		times, vals = append(times, e.t), append(vals, e.value)
	}
	if a := d.send(timedBatch(d.id, d.stream, 301, times, vals)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("ack %v", a)
	}
	sent = append(sent, late...)
	want := expectedFiring(sent, warm)
	crowdID := fmt.Sprintf("crowd/device=d1/%d", d1Minute2)
	warmID := fmt.Sprintf("warm/device=d1/%d", d1Minute2)
	if !want[crowdID] || want[warmID] {
		t.Fatalf("test data: the late batch must push %s over and pull %s under", crowdID, warmID)
	}
	r, body := waitAlerts(t, s1, want)
	for _, a := range r.Alerts {
		switch a.ID {
		case crowdID:
			if a.Revision != 1 || a.State != rules.Firing || a.Value != 80 {
				t.Fatalf("late crossing %+v", a)
			}
		case warmID:
			if a.Revision != 2 || a.State != rules.Resolved {
				t.Fatalf("pulled back %+v", a)
			}
		}
	}

	// Crash: no final checkpoint; the restart replays the late batch.
	s1.skipFinalCheckpoint = true
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := startHub(t, opts())
	_, body2 := waitAlerts(t, s2, want)
	if !bytes.Equal(body, body2) {
		t.Fatalf("alerts differ after the crash:\n before %s\n after  %s", body, body2)
	}
}

func TestAlertsAPIParamErrors(t *testing.T) {
	o := aggTestOptions(t, t.TempDir())
	rs, err := rules.ParseYAML([]byte(`rules: [{name: gone, kind: offline, after: 1m}]`))
	if err != nil {
		t.Fatal(err)
	}
	o.Rules = rs
	s := startHub(t, o)
	for q, param := range map[string]string{
		"?state=burning": "state", "?limit=0": "limit", "?limit=x": "limit", "?from=yesterday": "from",
		"?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z": "to", "?cursor=zz": "cursor", "?colour=red": "colour",
	} {
		code, body := getJSON(t, s.Handler(), "/v1/alerts"+q, nil)
		var e hubapi.APIError
		_ = json.Unmarshal(body, &e)
		if code != 400 || e.Param != param {
			t.Fatalf("%s: %d %s, want a 400 naming %s", q, code, body, param)
		}
	}
	if code, body := getJSON(t, s.Handler(), "/v1/alerts", nil); code != 200 || !bytes.Contains(body, []byte(`"alerts":[]`)) {
		t.Fatalf("empty: %d %s", code, body)
	}
}

func TestRulesNeedEngine(t *testing.T) {
	o := testOptions(t, t.TempDir())
	rs, _ := rules.ParseYAML([]byte(`rules: [{name: gone, kind: offline, after: 1m}]`))
	o.Rules = rs
	if _, err := New(o); err == nil {
		t.Fatal("rules without the engine accepted")
	}
}

// TestAlertOnStream: a new alert reaches an open /v1/stream as an
// "alert" event.
func TestAlertOnStream(t *testing.T) {
	o := aggTestOptions(t, t.TempDir())
	rs, err := rules.ParseYAML([]byte(`rules: [{name: any, metric: temp, window: "tumbling:1m", agg: count, op: ">=", value: 1, group_by: [device]}]`))
	if err != nil {
		t.Fatal(err)
	}
	o.Rules = rs
	s := startHub(t, o)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "al1")
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	d.send(timedBatch("al1", d.stream, 1, []int64{base.UnixNano(), base.Add(time.Second).UnixNano()}, []float64{1, 2}))
	want := fmt.Sprintf(`"id":"any/device=al1/%d"`, base.UnixNano())
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: alert") && sc.Scan() && strings.Contains(sc.Text(), want) {
			return
		}
	}
	t.Fatalf("stream ended before the alert: %v", sc.Err())
}

// TestOfflineRuleThroughHub: a device's offline status (from the log)
// fires an offline rule on a later logged tick and its return resolves it.
func TestOfflineRuleThroughHub(t *testing.T) {
	o := aggTestOptions(t, t.TempDir())
	rs, err := rules.ParseYAML([]byte(`rules: [{name: gone, kind: offline, after: 100ms}]`))
	if err != nil {
		t.Fatal(err)
	}
	o.Rules = rs
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "off1")
	status := func(online bool) {
		st, _ := wire.EncodeStatus(&wirepb.Status{DeviceId: "off1", Online: online})
		if tok := d.c.Publish(wire.StatusTopic("off1"), 1, true, st); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	alertIn := func(state rules.State) func() bool {
		return func() bool {
			as, _, _ := s.Alerts(rules.Filter{Rule: "gone", State: state})
			return len(as) == 1 && as[0].Group == "device=off1"
		}
	}
	status(true)
	status(false)
	waitFor(t, alertIn(rules.Firing))
	status(true)
	waitFor(t, alertIn(rules.Resolved))
}
