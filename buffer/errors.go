package buffer

import "errors"

// Errors callers branch on.
var (
	// ErrFull is returned by Append on a Reject stream at its bound.
	ErrFull = errors.New("buffer: stream is full")
	// ErrTooLarge is returned by Append for records that could never fit:
	// more than the stream's MaxBytes, or one record over MaxBlockBytes.
	ErrTooLarge = errors.New("buffer: append larger than the stream's bound")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("buffer: store is closed")
	// ErrLocked means another process has the directory open.
	ErrLocked = errors.New("buffer: directory is in use by another process")
)

// ErrCorrupt classifies damaged data found in the store. Errors wrapping it
// name the directory, the stream and what the operator can do.
var ErrCorrupt = errors.New("buffer: corrupt data")

// ErrDiskFull is what an append refused because the store's filesystem is
// short of space wraps (with ErrFull: callers that treat a full stream as
// "try again later" need not know the difference), and what Open wraps when
// the filesystem has too little space to open the store at all.
var ErrDiskFull = errors.New("buffer: filesystem short of space")

// errNew tells loadStream that a stream has no metadata yet: it is
// created, never reported.
var errNew = errors.New("buffer: new stream")
