package aggregate

// StreamID identifies one buffer of a device (random per buffer directory).
// It has the layout of wire.StreamID, so the hub converts with
// aggregate.StreamID(id).
type StreamID [16]byte

// Tag is one key=value label of an event.
type Tag struct {
	Key   string
	Value string
}

// Event is one applied event as the engine needs it.
type Event struct {
	// Seq is the event's sequence number in its stream.
	Seq uint64
	// Metric is the metric name; it should be interned by the caller.
	Metric string
	// Tags are the event's labels in any order; only Options.TagKeys are
	// kept (all when TagKeys is empty).
	Tags []Tag
	// Value is the measured value; NaN and infinities are counted and
	// dropped.
	Value float64
	// Time is the corrected event time, Unix ns.
	Time int64
	// Uncertainty is the half-width of the interval holding the true time,
	// ns. It is carried for consumers; windows use Time.
	Uncertainty int64
	// Untrusted marks events whose time cannot be trusted (never synced):
	// they are counted and kept out of windows.
	Untrusted bool
}

// Batch is one batch as the hub applied it: the fresh events of one
// stream, in sequence order. The engine copies what it keeps, so the
// caller may reuse Events and Tags after Apply returns.
type Batch struct {
	// Seq is the batch's position in the hub's log (strictly increasing),
	// or 0 when unknown. It makes merges into evicted partials idempotent
	// under log replay.
	Seq uint64
	// Device and Stream identify the stream.
	Device string
	Stream StreamID
	// ServerTime is the hub's clock when the batch arrived, Unix ns; it is
	// the engine's processing time.
	ServerTime int64
	// Backlog is true when the agent reported events still queued: the
	// stream is draining and must not hold the hub watermark back.
	Backlog bool
	// Events are the applied events.
	Events []Event
}
