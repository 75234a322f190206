package batchview

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// View is a parsed batch that points into the decompressed body
// instead of copying it: parsing a batch of 1000 events costs no allocation
// per event (wire.DecodeBatch costs about six). Its slices are reused from
// batch to batch, so a view belongs to one pending batch at a time.
type View struct {
	Device     []byte
	StreamID   []byte
	FirstSeq   uint64
	SendTimeNs int64
	HasBacklog bool
	Backlog    wirepb.Backlog
	HasClock   bool
	Clock      ClockView
	RangeAcks  bool // the agent takes one ack for a run of batches
	Gaps       []GapView
	Events     []EventView
	Tags       []TagView
	fastErr    error        // the rejection eventFieldFast found
	Refused    []RefusedRun // events the hub refuses one by one (validateEvents)
	// badStrings marks the strings of a columnar batch that are not valid
	// UTF-8 (nil when all are): the events using one as metric or tag are
	// refused, the others applied.
	badStrings []bool
	cols       wire.Columns // a columnar batch's columns, reused
	// columnar: the events are in cols, and events and tags are built
	// from them only when something asks for them (eventList): checking
	// and logging a batch reads the columns.
	Columnar bool
}

// len is the number of events in the batch.
func (v *View) Len() int {
	if v.Columnar {
		return v.cols.Len()
	}
	return len(v.Events)
}

// eventList returns the batch's events, building them from the columns
// of a columnar batch the first time.
func (v *View) EventList() []EventView {
	if !v.Columnar || len(v.Events) == v.cols.Len() {
		return v.Events
	}
	c := &v.cols
	v.Tags = v.Tags[:0]
	for _, t := range c.Tags {
		v.Tags = append(v.Tags, TagView{Key: c.Strings[t.Key], Value: c.Strings[t.Value]})
	}
	n := c.Len()
	if cap(v.Events) < n {
		v.Events = make([]EventView, 0, n)
	}
	v.Events = v.Events[:n]
	for i := range v.Events {
		set := c.TagSet[i]
		v.Events[i] = EventView{
			Metric:        c.Strings[c.Metric[i]],
			Value:         c.Value[i],
			DeviceTimeNs:  c.Time[i],
			MonoNs:        c.Mono[i],
			BootID:        c.Strings[c.Boot[i]],
			OffsetNs:      c.Offset[i],
			UncertaintyNs: c.Uncertainty[i],
			Method:        wirepb.TimeMethod(int32(c.Method[i])),
			TagLo:         c.SetStart[set],
			TagHi:         c.SetStart[set+1],
		}
	}
	return v.Events
}

// clockView is the agent's ClockEstimate.
type ClockView struct {
	OffsetNs, UncertaintyNs int64
	DriftPPM                float64
	Method                  wirepb.TimeMethod
	SampledAtNs             int64
}

// gapView is one reported Gap.
type GapView struct {
	First, Last uint64
	Reason      []byte
}

// eventView is one Event; its tags are view.tags[tagLo:tagHi].
type EventView struct {
	Metric        []byte
	Value         float64
	DeviceTimeNs  int64
	MonoNs        int64
	BootID        []byte
	OffsetNs      int64
	UncertaintyNs int64
	Method        wirepb.TimeMethod
	TagLo, TagHi  int32
	fault         wire.Fault // found while parsing (a string not valid UTF-8)
}

// tagView is one Tag.
type TagView struct{ Key, Value []byte }

// reset empties v for reuse, keeping its slices' capacity.
func (v *View) reset() {
	*v = View{Gaps: v.Gaps[:0], Events: v.Events[:0], Tags: v.Tags[:0], cols: v.cols, Refused: v.Refused[:0]}
}

// field is one decoded protobuf field: v for scalar types, b for bytes.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// nextField decodes the field at the start of b and returns the rest.
func nextField(b []byte) (field, []byte, error) {
	// Fast path for what batches are made of: a one-byte tag (field
	// numbers below 16) and a varint, a fixed64, or bytes shorter than 128.
	// Anything else, malformed input included, takes the general path.
	if len(b) >= 2 && b[0] < 0x80 && b[0]>>3 != 0 {
		num, typ := protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b[1:])
			if m > 0 {
				return field{num: num, typ: typ, v: v}, b[1+m:], nil
			}
		case protowire.Fixed64Type:
			if len(b) >= 9 {
				return field{num: num, typ: typ, v: binary.LittleEndian.Uint64(b[1:])}, b[9:], nil
			}
		case protowire.BytesType:
			if l := int(b[1]); l < 0x80 && l <= len(b)-2 {
				return field{num: num, typ: typ, b: b[2 : 2+l : 2+l]}, b[2+l:], nil
			}
		}
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return field{}, nil, malformed("bad field tag: %v", protowire.ParseError(n))
	}
	b = b[n:]
	f := field{num: num, typ: typ}
	var m int
	switch typ {
	case protowire.VarintType:
		f.v, m = protowire.ConsumeVarint(b)
	case protowire.Fixed64Type:
		f.v, m = protowire.ConsumeFixed64(b)
	case protowire.Fixed32Type:
		var v32 uint32
		v32, m = protowire.ConsumeFixed32(b)
		f.v = uint64(v32)
	case protowire.BytesType:
		f.b, m = protowire.ConsumeBytes(b)
	default:
		m = protowire.ConsumeFieldValue(num, typ, b)
	}
	if m < 0 {
		return field{}, nil, malformed("field %d: %v", num, protowire.ParseError(m))
	}
	return f, b[m:], nil
}

// forFields calls fn with each field of the message b, stopping at the
// first malformed field or error. Events and tags, the hot path, loop
// inline with their fast paths instead.
func forFields(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// expect checks a known field's wire type.
func (f field) expect(typ protowire.Type, what string) error {
	if f.typ != typ {
		return malformed("%s has wire type %d, want %d", what, f.typ, typ)
	}
	return nil
}

// str checks a string field: bounded and valid UTF-8, as proto3 requires.
func (f field) str(what string, maxLen int) ([]byte, error) {
	if err := f.expect(protowire.BytesType, what); err != nil {
		return nil, err
	}
	return checkStr(f.b, what, maxLen)
}

// checkStr checks a string's length and UTF-8.
func checkStr(b []byte, what string, maxLen int) ([]byte, error) {
	if len(b) > maxLen {
		return nil, Reject(ReasonTooLarge, "%s is %d bytes, limit %d", what, len(b), maxLen)
	}
	if !utf8.Valid(b) {
		return nil, malformed("%s is not valid UTF-8", what)
	}
	return b, nil
}

// ParseBatchFrame fills v from a batch frame in any codec, bounding counts
// and sizes by lim (whose fields must all be set). A columnar batch is read
// from its columns, not rewritten as protobuf first.
func ParseBatchFrame(v *View, payload []byte, lim wire.Limits) error {
	v.reset() // a failed unframe must not describe the view's last batch
	body, columnar, err := wire.UnframeBatch(payload, lim)
	switch {
	case err != nil:
		return err
	case columnar:
		return v.fromColumns(body, lim)
	}
	return ParseBatchView(v, body, lim)
}

// fromColumns fills v from a columnar batch body, leaving the events in
// their columns (eventList builds them; they then share the tag ranges of
// their tag sets, and strings point into the body). Each string is checked
// once, as the protobuf path checks each use.
func (v *View) fromColumns(body []byte, lim wire.Limits) error {
	c := &v.cols
	if err := c.Decode(body, lim); err != nil {
		return err
	}
	if err := forFields(c.Header, func(f field) error { return v.batchField(f, lim) }); err != nil {
		return err
	}
	for i, s := range c.Strings {
		if !utf8.Valid(s) {
			if v.badStrings == nil {
				v.badStrings = make([]bool, len(c.Strings))
			}
			v.badStrings[i] = true
		}
	}
	if v.badStrings != nil {
		for i := range c.Len() {
			if v.badStrings[c.Boot[i]] {
				return malformed("event %d: boot id is not valid UTF-8", i)
			}
		}
	}
	v.Columnar = true
	return nil
}

// columnStringFault says whether event i of a columnar batch uses a
// string that is not valid UTF-8 as its metric or a tag.
func (v *View) columnStringFault(i int) wire.Fault {
	c := &v.cols
	if v.badStrings[c.Metric[i]] {
		return wire.FaultMetric
	}
	set := c.TagSet[i]
	for _, t := range c.Tags[c.SetStart[set]:c.SetStart[set+1]] {
		if v.badStrings[t.Key] || v.badStrings[t.Value] {
			return wire.FaultTag
		}
	}
	return wire.FaultNone
}

// ParseBatchView fills v from a decompressed batch body, bounding counts
// and sizes by lim (whose fields must all be set).
func ParseBatchView(v *View, body []byte, lim wire.Limits) error {
	v.reset()
	return forFields(body, func(f field) error { return v.batchField(f, lim) })
}

// batchField stores one top-level Batch field.
func (v *View) batchField(f field, lim wire.Limits) error {
	var err error
	switch f.num {
	case wire.FieldBatchDeviceID:
		v.Device, err = f.str("device id", lim.MaxStringBytes)
	case wire.FieldBatchStreamID:
		err = f.expect(protowire.BytesType, "stream id")
		v.StreamID = f.b
	case wire.FieldBatchFirstSeq:
		err = f.expect(protowire.VarintType, "first_seq")
		v.FirstSeq = f.v
	case wire.FieldBatchEvents:
		if err = f.expect(protowire.BytesType, "event"); err == nil {
			err = v.addEvent(f.b, lim)
		}
	case wire.FieldBatchSendTime:
		err = f.expect(protowire.VarintType, "send_time")
		v.SendTimeNs = int64(f.v)
	case wire.FieldBatchGaps:
		if err = f.expect(protowire.BytesType, "gap"); err == nil {
			err = v.addGap(f.b, lim)
		}
	case wire.FieldBatchBacklog:
		if err = f.expect(protowire.BytesType, "backlog"); err == nil {
			v.HasBacklog = true
			err = parseBacklog(&v.Backlog, f.b)
		}
	case wire.FieldBatchClock:
		if err = f.expect(protowire.BytesType, "clock"); err == nil {
			v.HasClock = true
			err = parseClock(&v.Clock, f.b)
		}
	case wire.FieldBatchRangeAcks:
		err = f.expect(protowire.VarintType, "range_acks")
		v.RangeAcks = f.v != 0
	}
	return err
}

// addEvent parses one Event and appends it.
func (v *View) addEvent(b []byte, lim wire.Limits) error {
	if len(v.Events) >= lim.MaxEvents {
		return Reject(ReasonTooLarge, "more than %d events in one batch", lim.MaxEvents)
	}
	e := EventView{TagLo: int32(len(v.Tags))}
	for len(b) > 0 {
		// Fast path for the fields every event has, in the shape the agent
		// writes them (one-byte tags, short strings); anything else takes
		// the general path below. A call to nextField per field was most
		// of the hub's parsing cost.
		if n := v.eventFieldFast(&e, b, lim); n > 0 {
			b = b[n:]
			continue
		} else if n < 0 {
			return fmt.Errorf("event %d: %w", len(v.Events), v.fastErr)
		}
		f, rest, err := nextField(b)
		if err != nil {
			return fmt.Errorf("event %d: %w", len(v.Events), err)
		}
		b = rest
		if err := v.eventField(&e, f, lim); err != nil {
			return fmt.Errorf("event %d: %w", len(v.Events), err)
		}
	}
	e.TagHi = int32(len(v.Tags))
	v.Events = append(v.Events, e)
	return nil
}

// eventFieldFast decodes the Event field at the start of b if it is a
// fixed64 value, a varint of a known number, or a string or tag shorter
// than 128 bytes, and returns the bytes it took; 0 means "take the general
// path", -1 a rejected field (the error is in v.fastErr).
func (v *View) eventFieldFast(e *EventView, b []byte, lim wire.Limits) int {
	if len(b) < 2 {
		return 0
	}
	switch t := b[0]; t {
	case wire.FieldEventValue<<3 | 1: // value, fixed64
		if len(b) < 9 {
			return 0
		}
		e.Value = math.Float64frombits(binary.LittleEndian.Uint64(b[1:]))
		return 9
	case wire.FieldEventDeviceTime << 3, wire.FieldEventMono << 3, wire.FieldEventOffset << 3, wire.FieldEventUncertainty << 3, wire.FieldEventMethod << 3: // varints
		x, m := uvarint(b[1:])
		if m <= 0 {
			return 0
		}
		switch t >> 3 {
		case wire.FieldEventDeviceTime:
			e.DeviceTimeNs = int64(x)
		case wire.FieldEventMono:
			e.MonoNs = int64(x)
		case wire.FieldEventOffset:
			e.OffsetNs = int64(x)
		case wire.FieldEventUncertainty:
			e.UncertaintyNs = int64(x)
		case wire.FieldEventMethod:
			e.Method = wirepb.TimeMethod(int32(x))
		}
		return 1 + m
	case wire.FieldEventMetric<<3 | 2, wire.FieldEventTags<<3 | 2, wire.FieldEventBootID<<3 | 2: // metric, tag, boot id
		l := int(b[1])
		if l >= 0x80 || l > len(b)-2 {
			return 0
		}
		val := b[2 : 2+l : 2+l]
		var err error
		switch t >> 3 {
		case wire.FieldEventMetric:
			e.Metric, err = v.eventStr(e, val, "metric name", wire.FaultMetric, lim)
		case wire.FieldEventTags:
			err = v.addTag(e, val, lim)
		case wire.FieldEventBootID:
			e.BootID, err = checkStr(val, "boot id", lim.MaxStringBytes)
		}
		if err != nil {
			v.fastErr = err
			return -1
		}
		return 2 + l
	}
	return 0
}

// uvarint decodes a varint of at most 10 bytes; m <= 0 means malformed
// or truncated (the general path then names the problem).
func uvarint(b []byte) (x uint64, m int) {
	for i, c := range b {
		if i == 10 {
			return 0, -1
		}
		if c < 0x80 {
			if i == 9 && c > 1 {
				return 0, -1
			}
			return x | uint64(c)<<(7*i), i + 1
		}
		x |= uint64(c&0x7f) << (7 * i)
	}
	return 0, 0
}

// eventField stores one Event field.
func (v *View) eventField(e *EventView, f field, lim wire.Limits) error {
	var err error
	switch f.num {
	case wire.FieldEventMetric:
		if err = f.expect(protowire.BytesType, "metric name"); err == nil {
			e.Metric, err = v.eventStr(e, f.b, "metric name", wire.FaultMetric, lim)
		}
	case wire.FieldEventValue:
		err = f.expect(protowire.Fixed64Type, "value")
		e.Value = math.Float64frombits(f.v)
	case wire.FieldEventTags:
		if err = f.expect(protowire.BytesType, "tag"); err == nil {
			err = v.addTag(e, f.b, lim)
		}
	case wire.FieldEventDeviceTime:
		err = f.expect(protowire.VarintType, "device_time")
		e.DeviceTimeNs = int64(f.v)
	case wire.FieldEventMono:
		err = f.expect(protowire.VarintType, "mono")
		e.MonoNs = int64(f.v)
	case wire.FieldEventBootID:
		e.BootID, err = f.str("boot id", lim.MaxStringBytes)
	case wire.FieldEventOffset:
		err = f.expect(protowire.VarintType, "offset")
		e.OffsetNs = int64(f.v)
	case wire.FieldEventUncertainty:
		err = f.expect(protowire.VarintType, "uncertainty")
		e.UncertaintyNs = int64(f.v)
	case wire.FieldEventMethod:
		err = f.expect(protowire.VarintType, "method")
		e.Method = wirepb.TimeMethod(int32(f.v))
	}
	return err
}

// addTag parses one Tag of e.
func (v *View) addTag(e *EventView, b []byte, lim wire.Limits) error {
	if len(v.Tags)-int(e.TagLo) >= lim.MaxTags {
		return Reject(ReasonTooLarge, "more than %d tags on one event", lim.MaxTags)
	}
	var t TagView
	for len(b) > 0 {
		// Fast path: key or value shorter than 128 bytes.
		if len(b) >= 2 && (b[0] == wire.FieldTagKey<<3|2 || b[0] == wire.FieldTagValue<<3|2) && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
			l := int(b[1])
			val, err := v.eventStr(e, b[2:2+l:2+l], [...]string{"tag key", "tag value"}[b[0]>>3-1], wire.FaultTag, lim)
			if err != nil {
				return err
			}
			if b[0]>>3 == wire.FieldTagKey {
				t.Key = val
			} else {
				t.Value = val
			}
			b = b[2+l:]
			continue
		}
		f, rest, err := nextField(b)
		if err != nil {
			return err
		}
		b = rest
		switch f.num {
		case wire.FieldTagKey, wire.FieldTagValue:
			if err = f.expect(protowire.BytesType, "tag"); err == nil {
				var val []byte
				if val, err = v.eventStr(e, f.b, "tag key or value", wire.FaultTag, lim); f.num == wire.FieldTagKey {
					t.Key = val
				} else {
					t.Value = val
				}
			}
		}
		if err != nil {
			return err
		}
	}
	v.Tags = append(v.Tags, t)
	return nil
}

// eventStr checks an event's metric or tag string: one longer than the
// limit rejects the batch (a bound), one that is not valid UTF-8 marks the
// event refused with fault and is kept as it is (the event is never
// applied).
func (v *View) eventStr(e *EventView, b []byte, what string, fault wire.Fault, lim wire.Limits) ([]byte, error) {
	if len(b) > lim.MaxStringBytes {
		return nil, Reject(ReasonTooLarge, "%s is %d bytes, limit %d", what, len(b), lim.MaxStringBytes)
	}
	if !utf8.Valid(b) && e.fault == wire.FaultNone {
		e.fault = fault
	}
	return b, nil
}

// addGap parses one Gap and appends it.
func (v *View) addGap(b []byte, lim wire.Limits) error {
	if len(v.Gaps) >= lim.MaxGaps {
		return Reject(ReasonTooLarge, "more than %d gaps in one batch", lim.MaxGaps)
	}
	var g GapView
	err := forFields(b, func(f field) (err error) {
		switch f.num {
		case wire.FieldGapFirstSeq:
			err = f.expect(protowire.VarintType, "gap first_seq")
			g.First = f.v
		case wire.FieldGapLastSeq:
			err = f.expect(protowire.VarintType, "gap last_seq")
			g.Last = f.v
		case wire.FieldGapReason:
			g.Reason, err = f.str("gap reason", lim.MaxStringBytes)
		}
		return err
	})
	if err != nil {
		return err
	}
	v.Gaps = append(v.Gaps, g)
	return nil
}

// parseBacklog merges a Backlog message into bl.
func parseBacklog(bl *wirepb.Backlog, b []byte) error {
	return forFields(b, func(f field) (err error) {
		switch f.num {
		case wire.FieldBacklogEvents:
			err = f.expect(protowire.VarintType, "backlog events")
			bl.Events = f.v
		case wire.FieldBacklogBytes:
			err = f.expect(protowire.VarintType, "backlog bytes")
			bl.Bytes = f.v
		case wire.FieldBacklogOldest:
			err = f.expect(protowire.VarintType, "backlog oldest")
			bl.OldestNs = int64(f.v)
		}
		return err
	})
}

// parseClock merges a ClockEstimate message into c.
func parseClock(c *ClockView, b []byte) error {
	return forFields(b, func(f field) (err error) {
		switch f.num {
		case wire.FieldClockOffset:
			err = f.expect(protowire.VarintType, "clock offset")
			c.OffsetNs = int64(f.v)
		case wire.FieldClockUncertainty:
			err = f.expect(protowire.VarintType, "clock uncertainty")
			c.UncertaintyNs = int64(f.v)
		case wire.FieldClockDrift:
			err = f.expect(protowire.Fixed64Type, "clock drift")
			c.DriftPPM = math.Float64frombits(f.v)
		case wire.FieldClockMethod:
			err = f.expect(protowire.VarintType, "clock method")
			c.Method = wirepb.TimeMethod(int32(f.v))
		case wire.FieldClockSampledAt:
			err = f.expect(protowire.VarintType, "clock sampled_at")
			c.SampledAtNs = int64(f.v)
		}
		return err
	})
}

// Columns returns a columnar batch's columns (nil for a batch of events):
// the event-time index reads event times from them without building the
// events.
func (v *View) Columns() *wire.Columns {
	if !v.Columnar {
		return nil
	}
	return &v.cols
}
