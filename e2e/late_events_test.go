package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestLateEventsFoundByEventTime: a device back from a day offline
// uploads, through hubd's embedded broker with a real MQTT client, the
// events of an hour 26 hours ago (in batches of five minutes each, and one
// batch spread over five days), then a few of now. GET /v1/events for that
// hour finds every one of them, in event-time order, paging with limit
// and next_from; after SIGKILL and a restart it still does, and events of
// that hour uploaded after the restart join them.
func TestLateEventsFoundByEventTime(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hubd")
	}
	h := startHub(t, filepath.Join(t.TempDir(), "hub"), "")
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.brokerURL).SetClientID("e2e-late").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer func() { c.Disconnect(100) }()

	const dev = "back-from-offline"
	id := wire.NewStreamID()
	hour := time.Now().Add(-26 * time.Hour).Truncate(time.Hour)
	type event struct {
		at    time.Time
		value float64
	}
	var inHour []event // the events in hour
	seq := uint64(1)
	publish := func(times []time.Time) {
		t.Helper()
		b := &wirepb.Batch{DeviceId: dev, StreamId: id[:], FirstSeq: seq, SendTimeNs: time.Now().UnixNano(),
			Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
		for _, ts := range times {
			b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64(seq), DeviceTimeNs: ts.UnixNano(),
				MonoNs: int64(seq), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP, UncertaintyNs: int64(time.Millisecond)})
			if !ts.Before(hour) && ts.Before(hour.Add(time.Hour)) {
				inHour = append(inHour, event{ts, float64(seq)})
			}
			seq++
		}
		payload, err := wire.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if tok := c.Publish(wire.BatchTopic(dev), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	want := func() []float64 {
		slices.SortStableFunc(inHour, func(a, b event) int { return a.at.Compare(b.at) })
		var out []float64
		for _, e := range inHour {
			out = append(out, e.value)
		}
		return out
	}
	// The hour, 50 events 6 s apart per batch, oldest first.
	for first := 0; first < 600; first += 50 {
		var ts []time.Time
		for i := first; i < first+50; i++ {
			ts = append(ts, hour.Add(time.Duration(i)*6*time.Second+time.Second))
		}
		publish(ts)
	}
	// One batch over five days, one event of it in the hour.
	publish([]time.Time{hour.Add(-72 * time.Hour), hour.Add(-48 * time.Hour), hour.Add(-24 * time.Hour), hour, hour.Add(24 * time.Hour)})
	publish([]time.Time{time.Now(), time.Now()})
	waitApplied(t, h, dev, seq-1)

	from, to := hour, hour.Add(time.Hour)
	if got, w := pageEvents(t, h, dev, from, to, 100), want(); !slices.Equal(got, w) || len(w) != 601 {
		t.Fatalf("/v1/events for the hour 26 h ago: %d events %v, want %d %v", len(got), got, len(w), w)
	}

	h.kill()
	h.start()
	if got, w := pageEvents(t, h, dev, from, to, 100), want(); !slices.Equal(got, w) {
		t.Fatalf("after SIGKILL and restart: %d events, want %d", len(got), len(w))
	}
	// After the restart the device uploads more of the hour's events: one
	// at the 59th second of each minute.
	c.Disconnect(100)
	c = paho.NewClient(paho.NewClientOptions().AddBroker(h.brokerURL).SetClientID("e2e-late").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("reconnect: %v", tok.Error())
	}
	var ts []time.Time
	for m := range 60 {
		ts = append(ts, hour.Add(time.Duration(m)*time.Minute+59*time.Second))
	}
	publish(ts)
	waitApplied(t, h, dev, seq-1)
	if got, w := pageEvents(t, h, dev, from, to, 100), want(); !slices.Equal(got, w) || len(w) != 661 {
		t.Fatalf("with the events uploaded after the restart: %d events %v, want %d %v", len(got), got, len(w), w)
	}
}

// pageEvents reads GET /v1/events for dev in [from, to), limit events a
// page, following next_from, and returns the values in order. Pages start
// at an event's time and may repeat events at exactly that time, which
// this test's events never share.
func pageEvents(t *testing.T, h *hubProc, dev string, from, to time.Time, limit int) []float64 {
	t.Helper()
	var out []float64
	for page := 0; ; page++ {
		var r struct {
			Events []struct {
				Value float64 `json:"value"`
			} `json:"events"`
			Truncated bool   `json:"truncated"`
			NextFrom  string `json:"next_from"`
		}
		q := fmt.Sprintf("/v1/events?device=%s&from=%s&to=%s&limit=%d", dev, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), limit)
		if err := json.Unmarshal(get(t, h, q), &r); err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			out = append(out, e.Value)
		}
		if !r.Truncated {
			return out
		}
		if page > 1000 {
			t.Fatalf("more than 1000 pages of %d", limit)
		}
		next, err := time.Parse(time.RFC3339Nano, r.NextFrom)
		if err != nil || !next.After(from) {
			t.Fatalf("next_from %q after from %v: %v", r.NextFrom, from, err)
		}
		from = next
	}
}
