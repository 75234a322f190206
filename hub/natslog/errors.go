package natslog

import "errors"

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrInvalidOption: an Options field is invalid; the message names it.
	ErrInvalidOption = errors.New("natslog: invalid option")
	// ErrPartitionsChanged: the stream exists with a different partition
	// count; the message says what the stream has.
	ErrPartitionsChanged = errors.New("natslog: partition count differs from the stream's")
	// ErrStreamMismatch: a stream of that name exists but captures other
	// subjects, transforms them differently or is not on disk.
	ErrStreamMismatch = errors.New("natslog: existing stream does not match")
	// ErrBadSubject: a stored message's subject is not
	// edgeflow.log.{partition}.{device token} with a valid device id.
	ErrBadSubject = errors.New("natslog: bad subject in stream")
	// ErrNoCheckpoint: no checkpoint was ever saved for the partition.
	ErrNoCheckpoint = errors.New("natslog: no checkpoint")
	// ErrCheckpointConflict: the checkpoint was replaced since the
	// revision the writer read, or created by another writer first.
	ErrCheckpointConflict = errors.New("natslog: checkpoint changed since it was read")
	// ErrCorruptCheckpoint: a stored checkpoint failed to decode.
	ErrCorruptCheckpoint = errors.New("natslog: corrupt checkpoint")
)

// Sentinel errors of Snapshots.
var (
	// ErrNoSnapshot: no snapshot was ever stored in the bucket.
	ErrNoSnapshot = errors.New("natslog: no snapshot")
	// ErrSnapshotConflict: the latest generation is not the one the
	// writer expected (another writer stored one since), so nothing was
	// made visible.
	ErrSnapshotConflict = errors.New("natslog: snapshot generation changed since it was read")
	// ErrCorruptSnapshot: a stored snapshot's bytes do not match the
	// checksum or size recorded when it was written, or fail to decode.
	ErrCorruptSnapshot = errors.New("natslog: corrupt snapshot")
	// ErrSnapshotMissing: the pointer names a snapshot object the bucket
	// no longer holds.
	ErrSnapshotMissing = errors.New("natslog: snapshot object missing")
	// ErrSnapshotTooLarge: a snapshot exceeds SnapshotOptions.MaxBytes.
	ErrSnapshotTooLarge = errors.New("natslog: snapshot larger than MaxBytes")
	// ErrInvalidSnapshot: a snapshot given to Put cannot be stored (a
	// field out of range); the message names the field.
	ErrInvalidSnapshot = errors.New("natslog: invalid snapshot")
	// ErrSnapshotFallback: Latest returned an older kept generation
	// because the newest could not be read; see SnapshotFallbackError.
	ErrSnapshotFallback = errors.New("natslog: fell back to an older snapshot")
)
