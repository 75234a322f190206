// Package lograte rate-limits repeated log lines: the agent's UDP ingest,
// the uplink and the hub all log bad input that a misbehaving peer can
// repeat thousands of times a second.
package lograte

import "time"

// Limiter lets one line through per Every and counts the lines it held
// back in between. It is not safe for concurrent use; callers that share
// one guard it themselves.
type Limiter struct {
	Every      time.Duration
	last       time.Time
	suppressed int
}

// Allow reports whether to log at now and, if so, how many lines were
// suppressed since the last one.
func (l *Limiter) Allow(now time.Time) (bool, int) {
	if !l.last.IsZero() && now.Sub(l.last) < l.Every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
