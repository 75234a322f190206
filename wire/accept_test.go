package wire

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"edgeflow/wire/wirepb"
)

func TestEventTimeBounds(t *testing.T) {
	if MinEventTimeNs != time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() ||
		MaxEventTimeNs != time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() {
		t.Fatal("bounds are not 2000-01-01 and 2200-01-01")
	}
	if !SaneTime(MinEventTimeNs) || SaneTime(MinEventTimeNs-1) || SaneTime(MaxEventTimeNs) || !SaneTime(MaxEventTimeNs-1) {
		t.Fatal("bounds are not [min, max)")
	}
	// A raw reading in 1970 repaired by the offset is fine; a sum that
	// wraps around into range is not.
	if !CorrectedTimeOK(5, MinEventTimeNs) || CorrectedTimeOK(math.MinInt64+1e18, -7_100_000_000_000_000_000) || CorrectedTimeOK(0, math.MaxInt64) {
		t.Fatal("CorrectedTimeOK")
	}
}

func TestDeviceTimeBounds(t *testing.T) {
	lo, hi := time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2201, 1, 1, 0, 0, 0, 0, time.UTC)
	if MinDeviceTimeNs != lo.UnixNano() || MaxDeviceTimeNs != hi.UnixNano() {
		t.Fatal("bounds are not 1971-01-01 and 2201-01-01")
	}
	for _, c := range []struct {
		t    time.Time
		want bool
	}{
		{lo, true}, {lo.Add(-1), false}, {hi.Add(-1), true}, {hi, false},
		{time.Date(1985, 1, 1, 0, 0, 0, 0, time.UTC), true}, // outside the trusted range, kept when untrusted
		{time.Time{}, false}, {time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), false},
	} {
		if got := DeviceTimeOK(c.t); got != c.want {
			t.Errorf("DeviceTimeOK(%v) = %v, want %v", c.t, got, c.want)
		}
	}
	if MinDeviceTimeNs > MinEventTimeNs || MaxDeviceTimeNs < MaxEventTimeNs {
		t.Fatal("the device range does not hold the trusted range")
	}
}

func TestCheckEvent(t *testing.T) {
	ok := func() *wirepb.Event {
		return &wirepb.Event{Metric: "temp", Value: 1, Tags: []*wirepb.Tag{{Key: "room", Value: "a"}},
			DeviceTimeNs: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano(), OffsetNs: 5, Method: wirepb.TimeMethod_TIME_METHOD_NTP}
	}
	year := func(y int) int64 { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() }
	cases := []struct {
		name   string
		mutate func(e *wirepb.Event)
		want   Fault
	}{
		{"ok", func(*wirepb.Event) {}, FaultNone},
		{"NaN", func(e *wirepb.Event) { e.Value = math.NaN() }, FaultValue},
		{"-Inf", func(e *wirepb.Event) { e.Value = math.Inf(-1) }, FaultValue},
		{"empty metric", func(e *wirepb.Event) { e.Metric = "" }, FaultMetric},
		{"metric not UTF-8", func(e *wirepb.Event) { e.Metric = "te\xffmp" }, FaultMetric},
		{"metric too long", func(e *wirepb.Event) { e.Metric = strings.Repeat("m", 257) }, FaultMetric},
		{"tag key not UTF-8", func(e *wirepb.Event) { e.Tags[0].Key = "r\xc3" }, FaultTag},
		{"tag value too long", func(e *wirepb.Event) { e.Tags[0].Value = strings.Repeat("v", 257) }, FaultTag},
		{"too many tags", func(e *wirepb.Event) {
			for range 64 {
				e.Tags = append(e.Tags, &wirepb.Tag{Key: "k", Value: "v"})
			}
		}, FaultTag},
		{"unknown method", func(e *wirepb.Event) { e.Method = MaxTimeMethod + 1 }, FaultMethod},
		{"negative method", func(e *wirepb.Event) { e.Method = -1 }, FaultMethod},
		{"negative uncertainty", func(e *wirepb.Event) { e.UncertaintyNs = -1 }, FaultUncertainty},
		{"trusted 1985", func(e *wirepb.Event) { e.DeviceTimeNs = year(1985) }, FaultTime},
		{"trusted 2200", func(e *wirepb.Event) { e.DeviceTimeNs, e.OffsetNs = year(2200), 0 }, FaultTime},
		{"untrusted 1985 is kept", func(e *wirepb.Event) {
			e.DeviceTimeNs, e.Method = year(1985), wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
		}, FaultNone},
		{"1970 clock repaired by the offset", func(e *wirepb.Event) { e.DeviceTimeNs, e.OffsetNs = 5, year(2025) }, FaultNone},
	}
	for _, c := range cases {
		e := ok()
		c.mutate(e)
		if got := CheckEvent(e, Limits{}); got != c.want {
			t.Errorf("%s: %v (%s), want %v (%s)", c.name, got, got.Reason(), c.want, c.want.Reason())
		}
	}
	for f, want := range map[Fault][2]string{FaultValue: {"bad_value", "value"}, FaultMetric: {"bad_metric", "metric"}, FaultTag: {"bad_tag", "tags"},
		FaultMethod: {"bad_method", "method"}, FaultUncertainty: {"bad_time", "uncertainty"}, FaultTime: {"bad_time", "ts"}} {
		if f.Reason() != want[0] || f.Field() != want[1] {
			t.Errorf("fault %d: %s %s", f, f.Reason(), f.Field())
		}
	}
}

// oldAck is the Ack message as schemas before refused events had it
// (fields 1-7), for decoding acks the way an older agent does.
func oldAck(t *testing.T) *dynamicpb.Message {
	t.Helper()
	fd := protodesc.ToFileDescriptorProto(wirepb.File_wirepb_wire_proto)
	for _, m := range fd.MessageType {
		if m.GetName() == "Ack" {
			m.Field = slices.DeleteFunc(m.Field, func(f *descriptorpb.FieldDescriptorProto) bool { return f.GetNumber() > 7 })
		}
	}
	file, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dynamicpb.NewMessage(file.Messages().ByName("Ack"))
}

// TestAckRefusedAcrossVersions: an ack that names refused events reads,
// to an agent whose schema predates them, as the plain OK it always was
// (the hub has recorded the refused events itself); an old hub's ack,
// without them, reads to a new agent as naming none.
func TestAckRefusedAcrossVersions(t *testing.T) {
	sid := NewStreamID()
	a := &wirepb.Ack{StreamId: sid[:], FirstSeq: 11, LastSeq: 30, Status: wirepb.AckStatus_ACK_STATUS_OK, ServerTimeNs: 7,
		Refused: []*wirepb.Gap{{FirstSeq: 14, LastSeq: 15, Reason: "bad_value"}}, RefusedEvents: 2}
	payload, err := EncodeAck(a)
	if err != nil {
		t.Fatal(err)
	}
	body, err := Unframe(MsgAck, payload, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	old := oldAck(t)
	if err := proto.Unmarshal(body, old); err != nil {
		t.Fatal(err)
	}
	get := func(name string) any {
		return old.Get(old.Descriptor().Fields().ByName(protoreflect.Name(name))).Interface()
	}
	if get("first_seq").(uint64) != 11 || get("last_seq").(uint64) != 30 || int32(get("status").(protoreflect.EnumNumber)) != int32(wirepb.AckStatus_ACK_STATUS_OK) {
		t.Fatalf("an old agent reads %v", old)
	}
	// The other way: what an old hub sends.
	oldPayload := Frame(MsgAck, mustMarshal(t, old.Interface()))
	plain := proto.Clone(a).(*wirepb.Ack)
	plain.Refused, plain.RefusedEvents = nil, 0
	old2 := oldAck(t)
	if err := proto.Unmarshal(mustMarshal(t, plain), old2); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAck(Frame(MsgAck, mustMarshal(t, old2.Interface())), Limits{})
	if err != nil || len(got.Refused) != 0 || got.Status != wirepb.AckStatus_ACK_STATUS_OK || got.LastSeq != 30 {
		t.Fatalf("an old hub's ack reads as %v, %v", got, err)
	}
	// The old decoder kept the new fields as unknown ones: re-encoded,
	// they are still there (nothing an intermediary drops).
	if back, err := DecodeAck(oldPayload, Limits{}); err != nil || back.RefusedEvents != 2 {
		t.Fatalf("re-encoded by an old schema: %v, %v", back, err)
	}
	// The largest ack a hub sends (32 refused ranges with the longest
	// reason) fits the ack decoder's bound.
	big := proto.Clone(a).(*wirepb.Ack)
	big.Refused = nil
	for i := range 32 {
		big.Refused = append(big.Refused, &wirepb.Gap{FirstSeq: math.MaxUint64 - uint64(2*i+1), LastSeq: math.MaxUint64 - uint64(2*i), Reason: "bad_method"})
	}
	big.Reason = strings.Repeat("r", 512)
	bp, err := EncodeAck(big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeAck(bp, Limits{}); err != nil {
		t.Fatalf("a hub's largest ack does not decode: %v", err)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
