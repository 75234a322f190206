package wire

// Field numbers of the messages in wirepb/wire.proto that the hand-written
// codecs read and write without the generated code: the frame scanner
// (ScanEvent, AppendEvent), the columns codec and the hub's batch view.
// They are untyped so that they serve as a protowire.Number and in the
// one-byte field tags those codecs compare (num<<3 | wire type). A test
// checks every one against the generated descriptors, so the schema and
// these names cannot drift apart.
const (
	// FieldBatchDeviceID is Batch.device_id (string).
	FieldBatchDeviceID = 1
	// FieldBatchStreamID is Batch.stream_id (bytes).
	FieldBatchStreamID = 2
	// FieldBatchFirstSeq is Batch.first_seq (varint).
	FieldBatchFirstSeq = 3
	// FieldBatchEvents is Batch.events (repeated Event).
	FieldBatchEvents = 4
	// FieldBatchSendTime is Batch.send_time_ns (varint).
	FieldBatchSendTime = 5
	// FieldBatchGaps is Batch.gaps (repeated Gap).
	FieldBatchGaps = 6
	// FieldBatchBacklog is Batch.backlog (Backlog).
	FieldBatchBacklog = 7
	// FieldBatchClock is Batch.clock (ClockEstimate).
	FieldBatchClock = 8
	// FieldBatchRangeAcks is Batch.range_acks (varint bool).
	FieldBatchRangeAcks = 9
)

const (
	// FieldEventMetric is Event.metric (string).
	FieldEventMetric = 1
	// FieldEventValue is Event.value (fixed64 double).
	FieldEventValue = 2
	// FieldEventTags is Event.tags (repeated Tag).
	FieldEventTags = 3
	// FieldEventDeviceTime is Event.device_time_ns (varint).
	FieldEventDeviceTime = 4
	// FieldEventMono is Event.mono_ns (varint).
	FieldEventMono = 5
	// FieldEventBootID is Event.boot_id (string).
	FieldEventBootID = 6
	// FieldEventOffset is Event.offset_ns (varint).
	FieldEventOffset = 7
	// FieldEventUncertainty is Event.uncertainty_ns (varint).
	FieldEventUncertainty = 8
	// FieldEventMethod is Event.method (varint TimeMethod).
	FieldEventMethod = 9
	// FieldEventLast is the highest Event field number: a codec that
	// keeps a bit per field (the columns encoder) sizes its set by it.
	FieldEventLast = FieldEventMethod
)

const (
	// FieldTagKey is Tag.key (string).
	FieldTagKey = 1
	// FieldTagValue is Tag.value (string).
	FieldTagValue = 2
)

const (
	// FieldGapFirstSeq is Gap.first_seq (varint).
	FieldGapFirstSeq = 1
	// FieldGapLastSeq is Gap.last_seq (varint).
	FieldGapLastSeq = 2
	// FieldGapReason is Gap.reason (string).
	FieldGapReason = 3
)

const (
	// FieldBacklogEvents is Backlog.events (varint).
	FieldBacklogEvents = 1
	// FieldBacklogBytes is Backlog.bytes (varint).
	FieldBacklogBytes = 2
	// FieldBacklogOldest is Backlog.oldest_ns (varint).
	FieldBacklogOldest = 3
)

const (
	// FieldClockOffset is ClockEstimate.offset_ns (varint).
	FieldClockOffset = 1
	// FieldClockUncertainty is ClockEstimate.uncertainty_ns (varint).
	FieldClockUncertainty = 2
	// FieldClockDrift is ClockEstimate.drift_ppm (fixed64 double).
	FieldClockDrift = 3
	// FieldClockMethod is ClockEstimate.method (varint TimeMethod).
	FieldClockMethod = 4
	// FieldClockSampledAt is ClockEstimate.sampled_at_ns (varint).
	FieldClockSampledAt = 5
)
