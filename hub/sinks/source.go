package sinks

import (
	"context"
	"time"

	"edgeflow/aggregate"
)

// Source is what a sink reads from the hub. The hub implements it; the
// sink never changes the hub's state.
type Source interface {
	// Applied returns the position of the last log entry the hub applied
	// (its effects are in the engine). Entries up to it are durable.
	Applied(ctx context.Context) (uint64, error)
	// FirstPosition returns the position of the oldest log entry the hub
	// still holds (0 when the log is empty): entries before it were
	// deleted by retention.
	FirstPosition() (uint64, error)
	// Read calls fn with each log entry after position from, up to and
	// including to, at most max entries, in log order; entries that carry
	// no events (ticks, statuses) come with no events. The Batch and its
	// slices are valid only during the call.
	Read(from, to uint64, max int, fn func(b *Batch) error) error
	// LogBytes returns the stored size (keys and values) of the log
	// entries after position from, up to and including to: the lag in
	// bytes. It reads no values.
	LogBytes(from, to uint64) (uint64, error)
	// Engine is the hub's event-time engine (nil without one): the
	// windows sink queries it for the results it writes.
	Engine() *aggregate.Engine
}

// Batch is one log entry as the hub applied it.
type Batch struct {
	// Pos is the entry's position in the hub's log.
	Pos uint64
	// Device and Stream (hex) identify the stream of a batch entry.
	Device, Stream string
	// ServerTime is the hub's clock when the batch arrived.
	ServerTime time.Time
	// Events are the events the hub applied from it (only the new ones).
	Events []Event
}

// Event is one applied event with its corrected time.
type Event struct {
	Seq    uint64
	Metric string
	Value  float64
	// Tags are the event's labels; keys are unique.
	Tags map[string]string
	// EventTimeNs is the corrected time (Unix ns) the hub windows by.
	EventTimeNs int64
	// Method says how EventTimeNs was corrected (NTP, HUB_SYNC, ...,
	// UNTRUSTED); UncertaintyNs is the half-width around it.
	Method        string
	UncertaintyNs int64
	// DeviceTimeNs is the device's raw clock at capture.
	DeviceTimeNs int64
}
