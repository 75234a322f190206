package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestHubdRefusesOneEventAppliesTheRest publishes to hubd, bypassing any
// agent's check, a batch of 20 events of which one is stamped 1985 with a
// trusted clock. hubd applies the 19 others, acks OK naming the refused
// event and its reason, records it as a gap with that reason on
// /v1/devices/{id}, counts it in edgeflow_hub_refused_events_total, takes
// a redelivery as DUPLICATE, and shows the same after a kill -9 and
// restart (the log entry records which events were refused).
func TestHubdRefusesOneEventAppliesTheRest(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hubd")
	}
	h := startHub(t, filepath.Join(t.TempDir(), "hub"), "")
	const dev = "e2e-refuse"
	acks := make(chan *wirepb.Ack, 16)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(h.brokerURL).SetClientID("e2e-refuse").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	if tok := c.Subscribe(wire.AckTopic(dev), 1, func(_ paho.Client, m paho.Message) {
		if a, err := wire.DecodeAck(m.Payload(), wire.Limits{}); err == nil {
			acks <- a
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sid := wire.NewStreamID()
	now := time.Now()
	b := &wirepb.Batch{DeviceId: dev, StreamId: sid[:], FirstSeq: 1, SendTimeNs: now.UnixNano(),
		Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
	for i := range 20 {
		ts := now.Add(time.Duration(i-20) * time.Second).UnixNano()
		if i == 7 {
			ts = time.Date(1985, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		}
		b.Events = append(b.Events, &wirepb.Event{Metric: "load", Value: float64(i), DeviceTimeNs: ts, BootId: "b",
			Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	payload, err := wire.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	send := func() *wirepb.Ack {
		t.Helper()
		if tok := c.Publish(wire.BatchTopic(dev), 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
		select {
		case a := <-acks:
			return a
		case <-time.After(20 * time.Second):
			t.Fatal("no ack")
		}
		return nil
	}
	a := send()
	// An agent of any version reads status, first and last: OK frees the
	// batch. A current one also reads which event was refused and why.
	if a.Status != wirepb.AckStatus_ACK_STATUS_OK || a.FirstSeq != 1 || a.LastSeq != 20 || a.RefusedEvents != 1 ||
		len(a.Refused) != 1 || a.Refused[0].FirstSeq != 8 || a.Refused[0].LastSeq != 8 || a.Refused[0].Reason != "bad_time" {
		t.Fatalf("ack %v", a)
	}
	if a := send(); a.Status != wirepb.AckStatus_ACK_STATUS_DUPLICATE {
		t.Fatalf("redelivery: %v", a)
	}
	check := func(when string) {
		t.Helper()
		var dv struct {
			Streams []struct {
				Applied    [][2]uint64       `json:"applied"`
				Events     uint64            `json:"events"`
				Gaps       [][2]uint64       `json:"gaps"`
				GapReasons map[string]uint64 `json:"gap_reasons"`
				Refused    [][2]uint64       `json:"refused"`
			} `json:"streams"`
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := json.Unmarshal(get(t, h, "/v1/devices/"+dev), &dv)
			if err == nil && len(dv.Streams) == 1 && dv.Streams[0].Events == 19 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: device %+v %v", when, dv, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		s := dv.Streams[0]
		if fmt.Sprint(s.Applied) != "[[1 7] [9 20]]" || fmt.Sprint(s.Gaps) != "[[8 8]]" || fmt.Sprint(s.Refused) != "[[8 8]]" ||
			len(s.GapReasons) != 1 || s.GapReasons["refused:bad_time"] != 1 {
			t.Fatalf("%s: stream %+v", when, s)
		}
		if m := string(get(t, h, "/metrics")); when == "live" && !strings.Contains(m, `edgeflow_hub_refused_events_total{reason="bad_time"} 1`) {
			t.Fatalf("/metrics lacks the refused event")
		}
	}
	check("live")
	h.kill()
	h.start()
	check("after kill -9 and restart")
}
