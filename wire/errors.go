package wire

import "errors"

// Errors that callers branch on; every decode error wraps one of them.
var (
	// ErrMalformed means the payload is not a valid frame or message.
	ErrMalformed = errors.New("wire: malformed payload")
	// ErrTooLarge means a size or count exceeds Limits.
	ErrTooLarge = errors.New("wire: payload exceeds limit")
	// ErrVersion means the frame has a schema version this build does not know.
	ErrVersion = errors.New("wire: unsupported schema version")
)
