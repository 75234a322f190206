// Package batchview parses and validates the hub's incoming batches without
// copying them: a View points into the decompressed body, so a batch of a
// thousand events costs no allocation per event, and its slices are reused
// from batch to batch. ParseBatchFrame unframes and parses a batch (protobuf
// or columnar), ValidateBatch checks it against the topic's device and the
// wire's bounds, and a refused batch or event carries a Rejection whose
// Reason is the label agents and dashboards branch on.
//
// The package depends on the wire package only; the hub's decode workers,
// committer and applier read the View's exported fields.
package batchview
