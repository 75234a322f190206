package clocksync

import "errors"

// Errors a round can end with; callers of Poll may branch on them.
var (
	// ErrNoSource means no NTP server nor the hub gave a valid sample.
	ErrNoSource = errors.New("clocksync: no time source answered")
	// ErrNoMajority means the sources disagreed and no majority of them
	// (nor the current fit) could say which were right.
	ErrNoMajority = errors.New("clocksync: time sources disagree")
	// ErrSuspect means the round disagreed with the fitted clock; it is
	// held back until Options.StepConfirm rounds confirm a source step.
	ErrSuspect = errors.New("clocksync: round inconsistent with the estimate")
)

// ErrNotConnected means the MQTT client has no open connection.
var ErrNotConnected = errors.New("clocksync: MQTT client not connected")

// ErrTooFar means a sample's round-trip delay exceeded Options.MaxDelay.
var ErrTooFar = errors.New("clocksync: round-trip delay too long")

// errHeld marks a server skipped this round (held off after a
// kiss-of-death, or the round cancelled); it is no failure to count.
var errHeld = errors.New("clocksync: server held off")

// ErrBadTimeResponse means the hub's answer does not fit the request: a
// different id or t1, t3 before t2, or t4 before t1.
var ErrBadTimeResponse = errors.New("clocksync: inconsistent hub time response")

// errStepDuring means the wall clock stepped during an exchange, so its
// wall timestamps cannot be placed on the monotonic timeline.
var errStepDuring = errors.New("clocksync: wall clock stepped during the exchange")
