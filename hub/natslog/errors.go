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
