// Package attrs is the hub's device attribute table: per device, a history
// of versions (a map of attributes in force from an effective time until
// the next version's), written through the HTTP API as entries of the
// hub's log and applied in log order, so a restart's replay and a
// checkpoint rebuild it exactly. Queries join events with the version in
// force at each event's event time (package aggregate's AttrSource,
// which Table implements); /v1/events carries the version too.
//
// The table validates and bounds what it holds (Limits), encodes one
// version as a log entry payload (EncodeVersion, DecodeVersion), encodes
// itself as a checkpoint snapshot (Snapshot, Restore), and compacts its
// history: versions older than a device's oldest stored event are folded
// into the version in force then (Compact).
package attrs
