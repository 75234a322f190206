// Package rules holds the hub's standing rules and the alerts they raise.
//
// A rule is fixed and the fleet's events flow through it: thresholds on a
// window aggregate (fed by the aggregate engine's window results),
// absence of events over event time (a dead man), devices offline by
// their connection status, a sequence of two events of one device within
// a duration of event time, and agent buffers filling up. Rules are
// evaluated on event time, so an alert follows late data: a window pushed
// over a threshold by late events fires late, one pulled back resolves,
// and every change bumps the alert's revision under the same
// deterministic id (rule, group, window or match).
//
// The Evaluator is a consumer of the hub's log like the engine: its inputs
// are the applied batches, the hub watermark, the engine's window updates,
// connection status and buffer status; its state is saved with
// MarshalState and restored with RestoreState, so a restart that replays
// the log gives the same alerts with the same ids. docs/RULES.md describes
// each rule kind and the alert model.
package rules
