package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/hub/alertout"
	"edgeflow/hub/api"
	"edgeflow/hub/rules"
	"edgeflow/internal/testbroker"
	"edgeflow/wire/wirepb"
)

// alertReceiver is a webhook receiver that records every change it took
// by idempotency key, and answers 503 while down.
type alertReceiver struct {
	down atomic.Bool
	mu   sync.Mutex
	got  map[string]rules.Alert // "id:revision" -> alert
	dups int
}

func (r *alertReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	b, _ := io.ReadAll(req.Body)
	var a rules.Alert
	if err := json.Unmarshal(b, &a); err != nil || req.Header.Get("Idempotency-Key") != fmt.Sprintf("%s:%d", a.ID, a.Revision) {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := req.Header.Get("Idempotency-Key")
	if _, ok := r.got[k]; ok {
		r.dups++
	}
	r.got[k] = a
}

// checkReceived compares what r took with the alerts: every revision of
// every alert at least once, the latest revision equal to the alert, and
// no alert the hub does not list.
func (r *alertReceiver) checkReceived(t *testing.T, alerts []rules.Alert) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := map[string]rules.Alert{}
	for _, a := range alerts {
		byID[a.ID] = a
		for rev := uint64(1); rev <= a.Revision; rev++ {
			if _, ok := r.got[fmt.Sprintf("%s:%d", a.ID, rev)]; !ok {
				t.Errorf("change %s revision %d never received", a.ID, rev)
			}
		}
		last := r.got[fmt.Sprintf("%s:%d", a.ID, a.Revision)]
		if !last.Start.Equal(a.Start) || last.State != a.State || last.Value != a.Value || !last.End.Equal(a.End) || !last.FiredAt.Equal(a.FiredAt) {
			t.Errorf("alert %s: last received %+v, the hub lists %+v", a.ID, last, a)
		}
	}
	for k, a := range r.got {
		if h, ok := byID[a.ID]; !ok || a.Revision > h.Revision {
			t.Errorf("received %s, which the hub does not list", k)
		}
	}
}

// waitOutputs polls the outputs' status until each is at the alert-change
// log's end with nothing pending.
func waitOutputs(t *testing.T, s *Server) []alertout.Status {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var v struct {
			Outputs []alertout.Status `json:"outputs"`
		}
		code, body := getJSON(t, s.Handler(), "/v1/alerts/outputs", &v)
		if code != 200 {
			t.Fatalf("/v1/alerts/outputs: %d %s", code, body)
		}
		s.rules.out.mu.Lock()
		last := s.rules.out.last
		s.rules.out.mu.Unlock()
		ok := len(v.Outputs) > 0
		for _, o := range v.Outputs {
			ok = ok && o.Pending == 0 && o.Position >= last && last > 0
		}
		if ok {
			return v.Outputs
		}
		if time.Now().After(deadline) {
			t.Fatalf("outputs not caught up with change %d: %s", last, body)
		}
	}
}

// TestAlertOutputsAcrossCrash: a webhook output receives every alert
// change of the threshold rules at least once although its receiver is
// down while late data revises the alerts and the hub crashes (no final
// checkpoint) before it comes back; after the restart the output resumes
// from its stored position and the changes the crash lost are re-derived
// by the replay.
func TestAlertOutputsAcrossCrash(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	var pre []sentEvent
	for i := 120; i < 180; i++ {
		pre = append(pre, sentEvent{"d1", base.Add(time.Duration(i) * time.Second).UnixNano(), float64((i*7+2*13)%101) - 20})
	}
	before := bruteMinutes(pre)["d1"][base.Add(2*time.Minute).UnixNano()]
	var late []sentEvent
	for i := 0; i < 20; i++ {
		late = append(late, sentEvent{"d1", base.Add(2*time.Minute + time.Duration(i)*time.Second + 500*time.Millisecond).UnixNano(), float64(i)})
	}
	after := bruteMinutes(append(pre, late...))["d1"][base.Add(2*time.Minute).UnixNano()]
	warm := (before.sum/float64(before.count) + after.sum/float64(after.count)) / 2
	rs, err := rules.ParseYAML(fmt.Appendf(nil, `
rules:
  - {name: crowd, metric: temp, window: "tumbling:1m", agg: count, op: ">", value: 70, group_by: [device]}
  - {name: warm, metric: temp, window: "tumbling:1m", agg: avg, op: ">", value: %v, group_by: [device]}
`, warm))
	if err != nil {
		t.Fatal(err)
	}
	rcv := &alertReceiver{got: map[string]rules.Alert{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	opts := func() Options {
		o := aggTestOptions(t, dir)
		o.Rules = rs
		o.AlertOutputs = []alertout.Config{{Name: "ops", Kind: alertout.KindWebhook, URL: srv.URL, MaxBackoff: 50 * time.Millisecond}}
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
	waitOutputs(t, s1)
	if err := s1.Checkpoint(); err != nil {
		t.Fatal(err)
	}

	rcv.down.Store(true)
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
	r1, _ := waitAlerts(t, s1, want)
	revised := 0
	for _, a := range r1.Alerts {
		if a.Revision > 1 {
			revised++
		}
	}
	if revised == 0 {
		t.Fatal("test data: the late batch revised no alert")
	}
	s1.skipFinalCheckpoint = true
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rcv.down.Store(false)
	s2 := startHub(t, opts())
	r2, _ := waitAlerts(t, s2, want)
	st := waitOutputs(t, s2)
	rcv.checkReceived(t, r2.Alerts)
	if fmt.Sprint(alertKeys(r1)) != fmt.Sprint(alertKeys(r2)) {
		t.Fatalf("alerts differ after the crash:\n before %v\n after  %v", alertKeys(r1), alertKeys(r2))
	}
	t.Logf("%d alerts (%d revised), %d changes received, %d received again; status after restart %+v", len(r2.Alerts), revised, len(rcv.got), rcv.dups, st)
}

// alertKeys lists id:revision:state of each alert.
func alertKeys(r api.AlertsResponse) []string {
	var out []string
	for _, a := range r.Alerts {
		out = append(out, fmt.Sprintf("%s:%d:%s", a.ID, a.Revision, a.State))
	}
	return out
}

// TestAlertOutputsNeedRules: outputs without rules are refused.
func TestAlertOutputsNeedRules(t *testing.T) {
	o := aggTestOptions(t, t.TempDir())
	o.AlertOutputs = []alertout.Config{{Name: "bus", Kind: alertout.KindMQTT, Topic: "edgeflow/alerts"}}
	if _, err := New(o); err == nil {
		t.Fatal("alert outputs without rules accepted")
	}
}

// TestAlertOutputsSequenceWentBack: a run without rules drops the rules'
// state from the checkpoint, so the next run with rules starts its change
// sequence again below the outputs' stored positions. The outputs continue
// from the new sequence: the alerts of the new data are all delivered.
func TestAlertOutputsSequenceWentBack(t *testing.T) {
	dir := t.TempDir()
	rs, err := rules.ParseYAML([]byte(`rules: [{name: any, metric: temp, window: "tumbling:1m", agg: count, op: ">=", value: 1, group_by: [device]}]`))
	if err != nil {
		t.Fatal(err)
	}
	rcv := &alertReceiver{got: map[string]rules.Alert{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	opts := func(withRules bool) Options {
		o := aggTestOptions(t, dir)
		if withRules {
			o.Rules = rs
			o.AlertOutputs = []alertout.Config{{Name: "ops", Kind: alertout.KindWebhook, URL: srv.URL, MaxBackoff: 50 * time.Millisecond}}
		}
		return o
	}
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	run := func(withRules bool, dev string, minutes int) *Server {
		s := startHub(t, opts(withRules))
		d := newDevice(t, "tcp://"+s.BrokerAddr(), dev)
		var times []int64
		var vals []float64
		for m := 0; m < minutes; m++ {
			times, vals = append(times, base.Add(time.Duration(m)*time.Minute).UnixNano()), append(vals, 1)
		}
		d.send(timedBatch(dev, d.stream, 1, times, vals))
		return s
	}
	s1 := run(true, "sw1", 4)
	waitOutputs(t, s1)
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := run(false, "sw2", 2)
	waitCount(t, s2, base, 6)
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s3 := run(true, "sw3", 3)
	want := map[string]bool{}
	for m := 0; m < 2; m++ { // the last minute is not final
		want[fmt.Sprintf("any/device=sw3/%d", base.Add(time.Duration(m)*time.Minute).UnixNano())] = true
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		missing := 0
		for id := range want {
			rcv.mu.Lock()
			if _, ok := rcv.got[id+":1"]; !ok {
				missing++
			}
			rcv.mu.Unlock()
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d alerts of the run after the one without rules never delivered; outputs %+v", missing, s3.AlertOutputStatuses())
		}
	}
}

// TestMQTTAlertOutputOnMosquitto: with an external broker (Mosquitto) the
// mqtt output publishes through the hub's connection to it; a subscriber
// there receives each alert change as /v1/alerts lists it.
func TestMQTTAlertOutputOnMosquitto(t *testing.T) {
	url := testbroker.StartMosquitto(t, testbroker.MosquittoOptions{}).URL()
	rs, err := rules.ParseYAML([]byte(`rules: [{name: any, metric: temp, window: "tumbling:1m", agg: count, op: ">=", value: 1, group_by: [device]}]`))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan rules.Alert, 16)
	sub := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("alert-sub"))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer sub.Disconnect(100)
	if tok := sub.Subscribe("edgeflow/alerts", 1, func(_ paho.Client, m paho.Message) {
		var a rules.Alert
		if err := json.Unmarshal(m.Payload(), &a); err != nil {
			t.Errorf("alert payload %s: %v", m.Payload(), err)
		}
		got <- a
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	o := aggTestOptions(t, t.TempDir())
	o.MQTTURL, o.ClientID = url, "hub-alert-out"
	o.Rules = rs
	o.AlertOutputs = []alertout.Config{{Name: "bus", Kind: alertout.KindMQTT, Topic: "edgeflow/alerts"}}
	s := startHub(t, o)
	waitReady(t, s)
	d := newDevice(t, url, "mq1")
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	d.send(timedBatch("mq1", d.stream, 1, []int64{base.UnixNano(), base.Add(time.Minute).UnixNano()}, []float64{1, 2}))
	select {
	case a := <-got:
		want, ok := s.RulesEvaluator().Get(a.ID)
		if !ok || a.ID != fmt.Sprintf("any/device=mq1/%d", base.UnixNano()) || a.Revision != want.Revision || a.State != want.State ||
			a.Value != want.Value || !a.FiredAt.Equal(want.FiredAt) {
			t.Fatalf("received %+v, the hub holds %+v", a, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no alert on Mosquitto; outputs %+v", s.AlertOutputStatuses())
	}
}
