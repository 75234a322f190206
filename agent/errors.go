package agent

import "errors"

// ErrBadEvent wraps every reason an ingested event is refused.
var ErrBadEvent = errors.New("agent: bad event")

// ErrAlreadyRun is returned by a second call of Run.
var ErrAlreadyRun = errors.New("agent: Run called twice")
