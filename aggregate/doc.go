// Package aggregate is the hub's event-time engine: it puts the fleet's
// events on one event-time axis, keeps mergeable partial aggregates at a
// base resolution, tracks per-stream and hub watermarks, decides when
// windows are final, merges late data into final windows (bumping their
// revision) and releases a merged, event-time ordered stream.
//
// The engine is a pure library. The hub feeds it applied batches in log
// order through Apply, checkpoints it with Snapshot/Restore, and serves
// Query, ReadStream, LateEvents and Subscribe over HTTP.
//
// # Model
//
// Every trusted event lands in a partial: the state of one series (metric,
// device and the configured tag keys) over one base bucket of
// Options.Resolution. A partial holds count, a compensated sum, min, max,
// first and last event time, last value (ties broken by stream and
// sequence) and a DDSketch with Options.SketchAccuracy relative error for
// quantiles. Any window whose size, slide or gap is a multiple of the
// resolution is a roll-up of partials at query time, so queries need no
// configuration change and partials from several hubs merge.
//
// Partials evicted to the store are read back (and decoded) by queries
// through a bounded cache, Options.QueryCachePartials, so repeated queries
// over evicted ranges cost what live ones do.
//
// # Downsampling and retention
//
// Options.Downsample keeps stored partials bounded on a long-lived hub:
// partials older than a tier's age (by the hub watermark, beyond any late
// event's reach) are merged into partials of the tier's coarser
// resolution, which replace them atomically in the store; partials older
// than Options.PartialsRetention are deleted. Tick runs the work in
// bounded, rate-limited passes. Which ranges may be downsampled follows
// from the watermark alone, so a query's answer does not depend on how
// far the passes got: windows over downsampled ranges must be multiples of
// the resolution kept there (else a *ParamError on window) and then
// answer exactly as without downsampling, quantiles included (sketches
// merge exactly). ExportPartials refuses downsampled ranges.
//
// # Several hubs
//
// A hub owns a partition of the fleet. ExportPartials returns a hub's
// partials of one metric as a PartialSet (versioned binary encoding), and
// QueryPartials answers a query from several hubs' sets as if one hub had
// seen every event: counts, sums and sketch bins add exactly.
//
// # Time
//
// A stream's watermark is the largest event time it has sent, capped at
// its batch's server time plus Options.MaxFutureSkew so a future-stamped
// device cannot make everyone late. The hub watermark is the minimum over
// active streams: streams idle for Options.IdleTimeout (processing time,
// taken from batch server times and Tick) and streams draining a backlog
// do not hold it back. The hub watermark never moves backwards. A window
// [start, end) is final once the hub watermark reaches end +
// AllowedLateness. An event for a final window within LateHorizon still
// merges in and counts as late; an event beyond the horizon goes to the
// late-events log. A stream the hub retires (Engine.RetireStream) leaves
// the watermark, Behind and Streams; its (device, id) may start again.
//
// The merged stream keeps pending events as per-stream sorted runs (a
// stream's events arrive almost in order) and releases them with a k-way
// merge, in (event time, stream, sequence) order.
//
// # Determinism
//
// Aggregates, finality, lateness and revisions are a function of the
// batches applied (in order) and of Tick calls. Feeding the same batches
// to a fresh engine (a rebuild) gives identical answers; a Tick moves only
// processing time, so a rebuild that skips ticks gives the same values and
// may differ only in which events were counted late.
package aggregate
