package agent

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/clocksync"
	"edgeflow/wire/wirepb"
)

// repairClock repairs every UNTRUSTED event with a fixed offset.
type repairClock struct{ calls int }

func (c *repairClock) Stamp() clocksync.Stamp { return clocksync.Stamp{} }
func (c *repairClock) Estimate() clocksync.Estimate {
	return clocksync.Estimate{}
}
func (c *repairClock) RepairEvent(ev *wirepb.Event) bool {
	c.calls++
	if ev.BootId != "this-boot" {
		return false
	}
	ev.OffsetNs, ev.Method = int64(time.Second), wirepb.TimeMethod_TIME_METHOD_REPAIRED
	return true
}

func TestRetime(t *testing.T) {
	enc := func(ev *wirepb.Event) []byte {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	c := &repairClock{}
	r := retimer{clock: c, m: &metrics{}}
	trusted := enc(&wirepb.Event{Metric: "m", BootId: "this-boot", Method: wirepb.TimeMethod_TIME_METHOD_NTP, Tags: []*wirepb.Tag{{Key: "k", Value: "v"}}})
	out, err := r.retime(trusted)
	if err != nil || &out[0] != &trusted[0] || c.calls != 0 {
		t.Fatalf("a trusted event was decoded or changed (calls %d, err %v)", c.calls, err)
	}
	untrusted := enc(&wirepb.Event{Metric: "m", BootId: "this-boot", DeviceTimeNs: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano()})
	out, err = r.retime(untrusted)
	var ev wirepb.Event
	if err != nil || proto.Unmarshal(out, &ev) != nil || ev.Method != wirepb.TimeMethod_TIME_METHOD_REPAIRED || ev.OffsetNs != int64(time.Second) || ev.Metric != "m" {
		t.Fatalf("untrusted event not repaired: %v %v", &ev, err)
	}
	other := enc(&wirepb.Event{Metric: "m", BootId: "other-boot"})
	if out, err = r.retime(other); err != nil || string(out) != string(other) {
		t.Fatalf("unrepairable event changed: %v", err)
	}
	// Repaired to 1985 + 1s, a time the hub refuses for a trusted event:
	// sent untrusted as stored, which the hub keeps.
	old := enc(&wirepb.Event{Metric: "m", BootId: "this-boot", DeviceTimeNs: time.Date(1985, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()})
	if out, err = r.retime(old); err != nil || string(out) != string(old) {
		t.Fatalf("an event repaired to a time the hub refuses was changed: %v", err)
	}
	if r.m.repaired.Load() != 1 || r.m.sentUntrusted.Load() != 2 || r.m.unrepairable.Load() != 1 {
		t.Errorf("counters repaired %d untrusted %d unrepairable %d", r.m.repaired.Load(), r.m.sentUntrusted.Load(), r.m.unrepairable.Load())
	}
	if _, err := r.retime([]byte{0xff, 0xff}); err == nil {
		t.Error("a malformed record gave no error")
	}
}

func TestStoredMethod(t *testing.T) {
	for _, m := range []wirepb.TimeMethod{wirepb.TimeMethod_TIME_METHOD_UNTRUSTED, wirepb.TimeMethod_TIME_METHOD_NTP, wirepb.TimeMethod_TIME_METHOD_DEVICE} {
		b, _ := proto.Marshal(&wirepb.Event{Metric: "x", Value: 1, BootId: "b", Method: m, Tags: []*wirepb.Tag{{Key: "a", Value: "b"}}})
		if got, ok := clocksync.StoredMethod(b); !ok || got != m {
			t.Errorf("StoredMethod = %v %v, want %v", got, ok, m)
		}
	}
	if _, ok := clocksync.StoredMethod([]byte{0x4a}); ok {
		t.Error("truncated record read as ok")
	}
}
