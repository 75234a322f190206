package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// jsonEvent is the shape of one event in POST /v1/events.
type jsonEvent struct {
	Metric string            `json:"metric"`
	Value  *float64          `json:"value"`
	TS     json.RawMessage   `json:"ts"`
	Tags   map[string]string `json:"tags"`
}

// LineError says which line (NDJSON) or element (JSON array) of a request
// is bad and why; it wraps ErrBadEvent.
type LineError struct {
	// Line is the 1-based line of an NDJSON body, or 0 for an array.
	Line int
	// Index is the 1-based element of a JSON array, or 0 for NDJSON.
	Index int
	// Err is the reason.
	Err error
}

// Error implements error.
func (e *LineError) Error() string {
	if e.Index > 0 {
		return fmt.Sprintf("event %d of the array: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("line %d: %v", e.Line, e.Err)
}

// Unwrap returns the reason.
func (e *LineError) Unwrap() error { return e.Err }

// parseJSONEvents parses a JSON array or NDJSON body of at most maxEvents
// events. It fails on the first bad event; nothing is returned then.
func parseJSONEvents(body []byte, maxEvents int) ([]point, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return parseJSONArray(trimmed, maxEvents)
	}
	return parseNDJSON(body, maxEvents)
}

func parseJSONArray(body []byte, maxEvents int) ([]point, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("%w: body is not a JSON array of events: %v", ErrBadEvent, err)
	}
	if len(raw) > maxEvents {
		return nil, fmt.Errorf("%w: %d events in one request, at most %d", ErrBadEvent, len(raw), maxEvents)
	}
	pts := make([]point, 0, len(raw))
	for i, r := range raw {
		p, err := parseJSONEvent(r)
		if err != nil {
			return nil, &LineError{Index: i + 1, Err: err}
		}
		pts = append(pts, p)
	}
	return pts, nil
}

func parseNDJSON(body []byte, maxEvents int) ([]point, error) {
	var pts []point
	for line, rest := 1, body; len(rest) > 0; line++ {
		b := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			b, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		t := bytes.TrimSpace(b)
		if len(t) == 0 {
			continue
		}
		if len(pts) >= maxEvents {
			return nil, fmt.Errorf("%w: more than %d events in one request", ErrBadEvent, maxEvents)
		}
		p, err := parseJSONEvent(t)
		if err != nil {
			return nil, &LineError{Line: line, Err: err}
		}
		pts = append(pts, p)
	}
	if len(pts) == 0 {
		return nil, fmt.Errorf("%w: no events in the body", ErrBadEvent)
	}
	return pts, nil
}

// parseJSONEvent parses and checks one event object.
func parseJSONEvent(b []byte) (point, error) {
	var je jsonEvent
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&je); err != nil {
		return point{}, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	if d.More() {
		return point{}, fmt.Errorf("%w: more than one JSON value", ErrBadEvent)
	}
	if je.Value == nil {
		return point{}, fmt.Errorf("%w: value is missing", ErrBadEvent)
	}
	p := point{metric: je.Metric, value: *je.Value, tags: tagsFromMap(je.Tags)}
	ts, err := parseTS(je.TS)
	if err != nil {
		return point{}, err
	}
	p.ts = ts
	if err := checkPoint(&p); err != nil {
		return point{}, err
	}
	return p, nil
}

// parseTS reads ts: an RFC 3339 string or Unix milliseconds; absent or null
// is the zero time (the capture time).
func parseTS(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return time.Time{}, fmt.Errorf("%w: ts: %v", ErrBadEvent, err)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: ts %q is not RFC 3339 (2006-01-02T15:04:05Z) nor Unix milliseconds", ErrBadEvent, s)
		}
		return t, nil
	}
	ms, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(raw), 64)
		if ferr != nil || math.IsNaN(f) || f < 0 || f > 1e15 {
			return time.Time{}, fmt.Errorf("%w: ts %s is not RFC 3339 nor Unix milliseconds", ErrBadEvent, raw)
		}
		return time.UnixMicro(int64(f * 1000)), nil
	}
	if ms < 0 || ms > 1e15 {
		return time.Time{}, fmt.Errorf("%w: ts %d is not Unix milliseconds in 1970..33658", ErrBadEvent, ms)
	}
	return time.UnixMilli(ms), nil
}
