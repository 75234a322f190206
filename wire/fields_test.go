package wire

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"edgeflow/wire/wirepb"
)

// TestFieldNumbersMatchSchema checks every named field number, and the
// wire type the hand-written codecs expect of it, against the generated
// descriptors of wire.proto.
func TestFieldNumbersMatchSchema(t *testing.T) {
	type field struct {
		name string
		num  protowire.Number
		typ  protowire.Type
	}
	const bytes, varint, fixed64 = protowire.BytesType, protowire.VarintType, protowire.Fixed64Type
	for _, c := range []struct {
		msg    proto.Message
		fields []field
	}{
		{&wirepb.Batch{}, []field{
			{"device_id", FieldBatchDeviceID, bytes}, {"stream_id", FieldBatchStreamID, bytes},
			{"first_seq", FieldBatchFirstSeq, varint}, {"events", FieldBatchEvents, bytes},
			{"send_time_ns", FieldBatchSendTime, varint}, {"gaps", FieldBatchGaps, bytes},
			{"backlog", FieldBatchBacklog, bytes}, {"clock", FieldBatchClock, bytes},
			{"range_acks", FieldBatchRangeAcks, varint},
		}},
		{&wirepb.Event{}, []field{
			{"metric", FieldEventMetric, bytes}, {"value", FieldEventValue, fixed64},
			{"tags", FieldEventTags, bytes}, {"device_time_ns", FieldEventDeviceTime, varint},
			{"mono_ns", FieldEventMono, varint}, {"boot_id", FieldEventBootID, bytes},
			{"offset_ns", FieldEventOffset, varint}, {"uncertainty_ns", FieldEventUncertainty, varint},
			{"method", FieldEventMethod, varint},
		}},
		{&wirepb.Tag{}, []field{{"key", FieldTagKey, bytes}, {"value", FieldTagValue, bytes}}},
		{&wirepb.Gap{}, []field{
			{"first_seq", FieldGapFirstSeq, varint}, {"last_seq", FieldGapLastSeq, varint}, {"reason", FieldGapReason, bytes},
		}},
		{&wirepb.Backlog{}, []field{
			{"events", FieldBacklogEvents, varint}, {"bytes", FieldBacklogBytes, varint}, {"oldest_ns", FieldBacklogOldest, varint},
		}},
		{&wirepb.ClockEstimate{}, []field{
			{"offset_ns", FieldClockOffset, varint}, {"uncertainty_ns", FieldClockUncertainty, varint},
			{"drift_ppm", FieldClockDrift, fixed64}, {"method", FieldClockMethod, varint},
			{"sampled_at_ns", FieldClockSampledAt, varint},
		}},
	} {
		md := c.msg.ProtoReflect().Descriptor()
		t.Run(string(md.Name()), func(t *testing.T) {
			// Every field of the message is named, so a field added to the
			// schema shows up here too.
			if n := md.Fields().Len(); n != len(c.fields) {
				t.Errorf("%s has %d fields, %d are named", md.FullName(), n, len(c.fields))
			}
			for _, f := range c.fields {
				fd := md.Fields().ByName(protoreflect.Name(f.name))
				if fd == nil {
					t.Errorf("%s has no field %s", md.FullName(), f.name)
					continue
				}
				if fd.Number() != f.num {
					t.Errorf("%s.%s is field %d, the constant says %d", md.FullName(), f.name, fd.Number(), f.num)
				}
				if got := wireType(fd); got != f.typ {
					t.Errorf("%s.%s has wire type %d, the codecs expect %d", md.FullName(), f.name, got, f.typ)
				}
			}
		})
	}
	fields, last := (&wirepb.Event{}).ProtoReflect().Descriptor().Fields(), protowire.Number(0)
	for i := range fields.Len() {
		last = max(last, fields.Get(i).Number())
	}
	if last != FieldEventLast {
		t.Errorf("FieldEventLast is %d, Event's highest field number %d", FieldEventLast, last)
	}
}

// wireType is the protobuf wire type a field is encoded with (repeated
// scalars aside, which these messages do not have).
func wireType(fd protoreflect.FieldDescriptor) protowire.Type {
	switch fd.Kind() {
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return protowire.Fixed64Type
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return protowire.Fixed32Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	}
	return protowire.VarintType
}
