package aggregate

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrInvalidOption: an Options field is invalid; the message names it.
	ErrInvalidOption = errors.New("aggregate: invalid option")
	// ErrInvalidQuery: a query parameter is invalid; see *ParamError.
	ErrInvalidQuery = errors.New("aggregate: invalid query")
	// ErrLimit: a query would exceed a configured cap; see *LimitError.
	ErrLimit = errors.New("aggregate: limit exceeded")
	// ErrSeriesLimit: events of new series were dropped because
	// Options.MaxSeries distinct series exist, or the device has
	// Options.MaxSeriesPerDevice.
	ErrSeriesLimit = errors.New("aggregate: series limit reached")
	// ErrQuarantined: events further ahead of the hub's time than
	// Options.FutureHorizon were held in the quarantine (none lost).
	ErrQuarantined = errors.New("aggregate: events quarantined")
	// ErrPartialsLimit: events that needed a new partial while
	// Options.MaxLivePartials partials of windows that are not final were
	// live were held in the quarantine (none lost).
	ErrPartialsLimit = errors.New("aggregate: live partials limit reached")
	// ErrQuarantineFull: the quarantine was full (Options.QuarantineSize)
	// and dropped the events that would have waited longest.
	ErrQuarantineFull = errors.New("aggregate: quarantine full")
	// ErrOffsetTooOld: a reader asked for an offset that has left the
	// bounded buffer; it must restart from the returned oldest offset.
	ErrOffsetTooOld = errors.New("aggregate: offset too old")
	// ErrSlowSubscriber: a subscriber's buffer filled up and it was dropped
	// so that ingest never blocks.
	ErrSlowSubscriber = errors.New("aggregate: subscriber too slow, dropped")
	// ErrCorruptSnapshot: a snapshot or stored partial failed to decode.
	ErrCorruptSnapshot = errors.New("aggregate: corrupt snapshot")
	// ErrIncompatibleSnapshot: a snapshot was taken with a different
	// resolution or sketch accuracy; rebuild from the log instead.
	ErrIncompatibleSnapshot = errors.New("aggregate: incompatible snapshot")
)

// errEmptyStore: a quantile asked of a sketch store that holds no value.
var errEmptyStore = errors.New("aggregate: the sketch store is empty")

// ParamError is a bad query parameter: Param is its name as the HTTP API
// spells it (metric, window, size, slide, gap, from, to, group_by, aggs).
type ParamError struct {
	Param  string
	Reason string
}

// Error implements error.
func (e *ParamError) Error() string {
	return fmt.Sprintf("invalid query parameter %s: %s", e.Param, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidQuery) true.
func (e *ParamError) Unwrap() error { return ErrInvalidQuery }

func paramErr(param, format string, args ...any) error {
	return &ParamError{Param: param, Reason: fmt.Sprintf(format, args...)}
}

// LimitError says which cap a query hit and its value.
type LimitError struct {
	// Limit is the option's YAML name (max_query_results, max_query_partials).
	Limit string
	// Max is the configured cap; Need is what the query needed (at least).
	Max, Need int
	// Estimated is true when the query was refused before it ran: Need
	// is then a floor computed from the engine's in-memory state, which
	// the query was certain to reach.
	Estimated bool
}

// Error implements error.
func (e *LimitError) Error() string {
	return fmt.Sprintf("query exceeds %s=%d (needs at least %d): narrow from/to, window or group_by", e.Limit, e.Max, e.Need)
}

// Unwrap makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Unwrap() error { return ErrLimit }
