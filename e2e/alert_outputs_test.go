package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/alertout"
	"edgeflow/hub/rules"
)

// alertSink records the alert changes one output delivered, by
// "id:revision".
type alertSink struct {
	mu   sync.Mutex
	got  map[string]rules.Alert
	dups int
}

func (s *alertSink) add(a rules.Alert) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := fmt.Sprintf("%s:%d", a.ID, a.Revision)
	if _, ok := s.got[k]; ok {
		s.dups++
	}
	s.got[k] = a
}

func (s *alertSink) has(id string, rev uint64) (rules.Alert, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.got[fmt.Sprintf("%s:%d", id, rev)]
	return a, ok
}

// unknown lists the changes received that the hub's alerts do not hold:
// an id it does not list, or a revision beyond its latest.
func (s *alertSink) unknown(alerts map[string]rules.Alert) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, a := range s.got {
		if h, ok := alerts[a.ID]; !ok || a.Revision > h.Revision {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// simAlert is the brute-force evaluation's alert.
type simAlert struct {
	rev   uint64
	state rules.State
	value float64
}

// TestAlertOutputsSurviveSIGKILL runs the real hubd with a threshold rule,
// a webhook output to a receiver in the test and an MQTT output on the
// embedded broker; it sends events that make the rule fire, and late
// events that revise, resolve and late-fire alerts, while the receiver is
// down for a part of the run and hubd is killed with SIGKILL twice. The
// receiver got every alert change (id, revision) at least once, its
// latest revision of each alert equals GET /v1/alerts, it got nothing
// /v1/alerts does not hold, and /v1/alerts equals a brute-force
// evaluation of the rule (ids, revisions, states, values). The MQTT
// subscriber got nothing unknown and every change made after the last
// restart (the embedded broker's sessions die with the process, so what
// was published while it reconnected is not asserted).
func TestAlertOutputsSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: kills real processes")
	}
	webhook := &alertSink{got: map[string]rules.Alert{}}
	var down atomic.Bool
	var requests, refusedWhileDown atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if down.Load() {
			refusedWhileDown.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var a rules.Alert
		if err := json.Unmarshal(b, &a); err != nil || r.Header.Get("Idempotency-Key") != fmt.Sprintf("%s:%d", a.ID, a.Revision) ||
			r.Header.Get("Authorization") != "Bearer e2e" {
			t.Errorf("bad webhook request: key %q auth %q body %s", r.Header.Get("Idempotency-Key"), r.Header.Get("Authorization"), b)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		webhook.add(a)
	}))
	defer rcv.Close()

	cfg := fmt.Sprintf(`aggregate:
  enabled: true
  allowed_lateness: 1s
  idle_timeout: 1h
  watermark_interval: 1ns
rules:
  - {name: hot, metric: temp, window: "tumbling:1m", agg: avg, op: ">", value: 50, group_by: [device]}
alert_outputs:
  - name: ops
    kind: webhook
    url: %s
    headers: {Authorization: "Bearer e2e"}
    timeout: 2s
    max_backoff: 200ms
  - {name: bus, kind: mqtt, topic: edgeflow/alerts, max_backoff: 200ms}
`, rcv.URL)
	h := startHubWithConfig(t, cfg)

	bus := &alertSink{got: map[string]rules.Alert{}}
	var subscribed atomic.Int64
	o := paho.NewClientOptions().AddBroker(h.brokerURL).SetClientID("e2e-alert-sub").SetCleanSession(true).
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(50 * time.Millisecond).
		SetMaxReconnectInterval(100 * time.Millisecond)
	o.SetOnConnectHandler(func(c paho.Client) {
		tok := c.Subscribe("edgeflow/alerts", 1, func(_ paho.Client, m paho.Message) {
			var a rules.Alert
			if err := json.Unmarshal(m.Payload(), &a); err != nil || a.ID == "" {
				t.Errorf("MQTT alert: %v: %s", err, m.Payload())
				return
			}
			bus.add(a)
		})
		if tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
			subscribed.Add(1)
		}
	})
	sub := paho.NewClient(o)
	sub.Connect().WaitTimeout(10 * time.Second)
	defer sub.Disconnect(100)
	waitSubscribed := func(n int64) {
		for deadline := time.Now().Add(20 * time.Second); subscribed.Load() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the MQTT subscriber did not subscribe again (%d of %d)", subscribed.Load(), n)
			}
		}
	}
	waitSubscribed(1)

	devs := []*sinkDevice{newSinkDevice(t, h.brokerURL, "al1"), newSinkDevice(t, h.brokerURL, "al2")}
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	sim := map[string]*simAlert{}
	alertID := func(dev string, m int) string {
		return fmt.Sprintf("hot/device=%s/%d", dev, base.Add(time.Duration(m)*time.Minute).UnixNano())
	}
	// evaluate is the threshold rule on one final window, as the
	// Evaluator applies it.
	evaluate := func(dev string, m int, sum float64, n int) {
		avg := sum / float64(n)
		id := alertID(dev, m)
		a := sim[id]
		switch {
		case a == nil && avg > 50:
			sim[id] = &simAlert{rev: 1, state: rules.Firing, value: avg}
		case a != nil && avg > 50 && (a.state != rules.Firing || a.value != avg):
			a.rev, a.state, a.value = a.rev+1, rules.Firing, avg
		case a != nil && avg <= 50 && a.state == rules.Firing:
			a.rev, a.state = a.rev+1, rules.Resolved
		}
	}
	send := func(d *sinkDevice, m int, offset time.Duration, values []float64) {
		t.Helper()
		times := make([]time.Time, len(values))
		for i := range values {
			times[i] = base.Add(time.Duration(m)*time.Minute + offset + time.Duration(i)*2*time.Second)
		}
		d.sendValues(times, values)
	}
	value := func(dev, m int) float64 {
		if (m+dev)%3 == 0 {
			return 80
		}
		return 20
	}
	const lastFinal = 13 // the watermark passes the windows up to minute 13
	sendMinutes := func(from, to int) {
		for m := from; m <= to; m++ {
			for k := 0; k < 3; k++ {
				for i, d := range devs {
					vals := make([]float64, 10)
					for j := range vals {
						vals[j] = value(i, m)
					}
					send(d, m, time.Duration(k)*20*time.Second, vals)
				}
			}
		}
	}
	type lateBatch struct {
		dev, m, n int
		v         float64
	}
	var late []lateBatch // sent for windows final long before
	sendLate := func(dev, m, n int, v float64) {
		vals := make([]float64, n)
		for j := range vals {
			vals[j] = v
		}
		send(devs[dev], m, time.Second, vals)
		late = append(late, lateBatch{dev, m, n, v})
	}

	sendMinutes(0, 5)
	down.Store(true)
	sendMinutes(6, 7)
	h.kill() // SIGKILL with the receiver down
	h.start()
	waitSubscribed(2)
	sendLate(0, 3, 10, 0) // al1 minute 3: 80 -> 60, revised
	sendMinutes(8, 9)
	down.Store(false)
	sendLate(0, 3, 20, 0) // al1 minute 3: -> 40, resolved
	sendMinutes(10, 11)
	h.kill()
	h.start()
	waitSubscribed(3)
	sendLate(1, 4, 10, 200) // al2 minute 4: 20 -> 65, fires late
	sendMinutes(12, 14)

	// The brute-force evaluation: every window once with its in-order
	// events (30 of one value), then once per late batch, in order.
	type win struct {
		sum float64
		n   int
	}
	wins := map[[2]int]*win{}
	for m := 0; m <= lastFinal; m++ {
		for i, d := range devs {
			wins[[2]int{i, m}] = &win{30 * value(i, m), 30}
			evaluate(d.id, m, 30*value(i, m), 30)
		}
	}
	for _, l := range late {
		w := wins[[2]int{l.dev, l.m}]
		w.sum += float64(l.n) * l.v
		w.n += l.n
		evaluate(devs[l.dev].id, l.m, w.sum, w.n)
	}

	var listed map[string]rules.Alert
	var problems []string
	var statuses []alertout.Status
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		listed, statuses = hubAlerts(t, h.httpAddr)
		problems = nil
		for id, s := range sim {
			a, ok := listed[id]
			if !ok || a.Revision != s.rev || a.State != s.state || s.state == rules.Firing && math.Abs(a.Value-s.value) > 1e-9 {
				problems = append(problems, fmt.Sprintf("alert %s: hub %+v, brute force %+v", id, a, *s))
			}
		}
		for id := range listed {
			if sim[id] == nil {
				problems = append(problems, fmt.Sprintf("alert %s: listed by the hub, not by the brute force", id))
			}
		}
		for id, a := range listed {
			for rev := uint64(1); rev <= a.Revision; rev++ {
				if _, ok := webhook.has(id, rev); !ok {
					problems = append(problems, fmt.Sprintf("webhook: change %s:%d never received", id, rev))
				}
			}
			if got, ok := webhook.has(id, a.Revision); ok && (got.State != a.State || got.Value != a.Value || !got.Start.Equal(a.Start) ||
				!got.End.Equal(a.End) || !got.FiredAt.Equal(a.FiredAt) || got.Rule != a.Rule || got.Group != a.Group) {
				problems = append(problems, fmt.Sprintf("webhook: latest %s is %+v, the hub lists %+v", id, got, a))
			}
		}
		for _, k := range webhook.unknown(listed) {
			problems = append(problems, "webhook: received "+k+", which /v1/alerts does not hold")
		}
		for _, k := range bus.unknown(listed) {
			problems = append(problems, "mqtt: received "+k+", which /v1/alerts does not hold")
		}
		// Changed after the last restart: the late firing and the windows
		// final only once minute 12's events came.
		for _, id := range []string{alertID("al2", 4), alertID("al2", 11), alertID("al1", 12)} {
			if a, ok := listed[id]; !ok {
				problems = append(problems, "test data: no alert "+id)
			} else if got, ok := bus.has(id, a.Revision); !ok || got.State != a.State || got.Value != a.Value {
				problems = append(problems, fmt.Sprintf("mqtt: %s:%d not received after the last restart", id, a.Revision))
			}
		}
		for _, s := range statuses {
			if s.Pending != 0 {
				problems = append(problems, fmt.Sprintf("output %s: %d pending", s.Name, s.Pending))
			}
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	revised, resolved := 0, 0
	for _, a := range listed {
		if a.Revision > 1 {
			revised++
		}
		if a.State == rules.Resolved {
			resolved++
		}
	}
	if revised == 0 || resolved == 0 || refusedWhileDown.Load() == 0 {
		t.Errorf("test data: %d revised and %d resolved alerts, %d requests refused while the receiver was down; want each > 0",
			revised, resolved, refusedWhileDown.Load())
	}
	t.Logf("%d alerts (%d revised, %d resolved); webhook: %d changes, %d received again, %d requests (%d refused while down); mqtt: %d changes, %d again; outputs %+v",
		len(listed), revised, resolved, len(webhook.got), webhook.dups, requests.Load(), refusedWhileDown.Load(), len(bus.got), bus.dups, statuses)
}

// hubAlerts reads GET /v1/alerts (by id) and GET /v1/alerts/outputs.
func hubAlerts(t *testing.T, httpAddr string) (map[string]rules.Alert, []alertout.Status) {
	t.Helper()
	var r struct {
		Alerts []rules.Alert `json:"alerts"`
	}
	var o struct {
		Outputs []alertout.Status `json:"outputs"`
	}
	for path, v := range map[string]any{"/v1/alerts?limit=10000": &r, "/v1/alerts/outputs": &o} {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(v)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
	}
	out := map[string]rules.Alert{}
	for _, a := range r.Alerts {
		out[a.ID] = a
	}
	return out, o.Outputs
}
