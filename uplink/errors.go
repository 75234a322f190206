package uplink

import "errors"

// ErrAlreadyRunning is returned by a second call of Run.
var ErrAlreadyRunning = errors.New("uplink: Run called twice")

// errTokenTimeout is returned when a paho token did not complete in time.
var errTokenTimeout = errors.New("uplink: no answer from the broker in time")
