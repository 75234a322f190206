package hub

import (
	"time"

	"edgeflow/hub/hubapi"
	"edgeflow/hub/ranges"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Consumer receives what the hub applies, in log order, from one goroutine.
// The event-time engine is one. A Consumer's state must be a function of
// the batches it was given: the hub checkpoints it with Snapshot and, after
// a restart, calls Restore and then Apply for every batch logged after the
// checkpoint, so it ends where it was before a crash.
type Consumer interface {
	// Name identifies the consumer's snapshot in a checkpoint; it must be
	// stable across restarts and unique among a Server's consumers.
	Name() string
	// Apply takes one applied batch. b and its slices are valid only during
	// the call (the hub reuses them); strings may be kept.
	Apply(b *AppliedBatch)
	// Snapshot returns the consumer's state as of the last Apply.
	Snapshot() ([]byte, error)
	// Restore replaces the consumer's state with a Snapshot's.
	Restore(snapshot []byte) error
}

// AppliedBatch is one batch as the hub applied it: only the events whose
// sequence numbers were new (a partially redelivered batch carries fewer
// events than it was sent with), with corrected event times.
type AppliedBatch struct {
	// WALSeq is the batch's position in the hub's log.
	WALSeq uint64
	// Device and Stream identify the stream.
	Device string
	Stream wire.StreamID
	// Ranges are the sequence ranges applied, ascending; Events follow them.
	Ranges []ranges.SeqRange
	// ServerTime is the hub's clock when the batch arrived.
	ServerTime time.Time
	// SendTimeNs is the device's clock when it sent the batch, Unix ns.
	SendTimeNs int64
	// Backlog is what the agent still held when it sent the batch.
	Backlog hubapi.Backlog
	// Events are the applied events in sequence order.
	Events []AppliedEvent
}

// AppliedEvent is one event with the time the hub puts it at.
type AppliedEvent struct {
	// Seq is the event's sequence number in its stream.
	Seq uint64
	// Metric is the metric name.
	Metric string
	// Value is the measured value (never NaN or infinite).
	Value float64
	// Tags are the event's labels in the producer's order.
	Tags []Tag
	// DeviceTimeNs is the raw device clock at capture, Unix ns.
	DeviceTimeNs int64
	// EventTimeNs is the corrected time, Unix ns: DeviceTimeNs plus the
	// offset of Method.
	EventTimeNs int64
	// UncertaintyNs is the half-width of the interval around EventTimeNs
	// that holds the true time.
	UncertaintyNs int64
	// Method says how EventTimeNs was corrected; UNTRUSTED events are kept
	// but must not count in windows unless repaired.
	Method wirepb.TimeMethod
}

// Tag is one key=value label of an event.
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ClockEstimator is the hub's own estimate of each device's clock error,
// from server_time - send_time of its batches (see clockest.go). The hub
// calls it from one goroutine, in log order.
type ClockEstimator interface {
	// Observe records one batch's send time (device clock) and arrival time
	// (hub clock).
	Observe(device string, sendTime, serverTime time.Time)
	// Estimate returns offset = true time - device clock, its uncertainty,
	// and whether there is an estimate at all.
	Estimate(device string) (offset, uncertainty time.Duration, ok bool)
}

// TimeRequestHandler answers devices' time requests (edge/v1/{d}/time/req).
type TimeRequestHandler interface {
	// HandleRequest handles one request message.
	HandleRequest(topic string, payload []byte)
}
