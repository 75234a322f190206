package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"edgeflow/wire"
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
		p.index = i + 1
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
		p.line = line
		pts = append(pts, p)
	}
	if len(pts) == 0 {
		return nil, fmt.Errorf("%w: no events in the body", ErrBadEvent)
	}
	return pts, nil
}

// parseJSONEvent parses and checks one event object.
func parseJSONEvent(b []byte) (point, error) {
	if err := checkJSONStrings(b); err != nil {
		return point{}, err
	}
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
	ts, has, err := parseTS(je.TS)
	if err != nil {
		return point{}, err
	}
	p.ts, p.hasTS = ts, has
	if err := checkPoint(&p); err != nil {
		return point{}, err
	}
	return p, nil
}

// parseTS reads ts: an RFC 3339 string or Unix milliseconds; absent or
// null means none (has false: the capture time). Any time given, even
// Go's zero time (0001-01-01), is the event's own and is checked as such.
func parseTS(raw json.RawMessage) (t time.Time, has bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, false, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return time.Time{}, false, fmt.Errorf("%w: ts: %v", ErrBadEvent, err)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%w: ts %q is not RFC 3339 (2006-01-02T15:04:05Z) nor Unix milliseconds", ErrBadEvent, s)
		}
		return t, true, nil
	}
	ms, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(raw), 64)
		if ferr != nil || math.IsNaN(f) || f < 0 || f > 1e15 {
			return time.Time{}, false, fmt.Errorf("%w: ts %s is not RFC 3339 nor Unix milliseconds", ErrBadEvent, raw)
		}
		return time.UnixMicro(int64(f * 1000)), true, nil
	}
	if ms < 0 || ms > 1e15 {
		return time.Time{}, false, fmt.Errorf("%w: ts %d is not Unix milliseconds in 1970..33658", ErrBadEvent, ms)
	}
	return time.UnixMilli(ms), true, nil
}

// checkJSONStrings refuses an event whose strings are not valid UTF-8:
// raw bytes that are not UTF-8, or a \u escape of half a surrogate pair.
// encoding/json would take either and store U+FFFD in its place, silently
// changing a metric or tag. The error names the field.
func checkJSONStrings(b []byte) error {
	if utf8.Valid(b) && !bytes.Contains(b, []byte(`\u`)) {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	var stack []jsonFrame
	prev := int64(0)
	tagN := 0
	for {
		tok, err := d.Token()
		if err != nil {
			return nil // not valid JSON: the decoder says so, and where
		}
		raw := b[prev:d.InputOffset()]
		prev = d.InputOffset()
		var top *jsonFrame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		isKey := top != nil && top.object && top.wantKey
		if s, ok := tok.(string); ok && !jsonStringValid(raw) {
			f := wire.FaultTag
			if len(stack) == 1 && (isKey || stack[0].key != "tags") {
				f = wire.FaultMetric
			}
			return refuse(f, "%s is not valid UTF-8", jsonFieldName(stack, isKey, s, tagN))
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			stack = append(stack, jsonFrame{object: tok == json.Delim('{'), wantKey: true})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			if isKey {
				top.key, top.wantKey = tok.(string), false
				if len(stack) == 2 {
					tagN++
				}
				continue
			}
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wantKey = true
		}
	}
}

// jsonFrame is an open object or array of checkJSONStrings' walk.
type jsonFrame struct {
	object  bool
	wantKey bool   // the next string is a key
	key     string // the last key read
}

// jsonFieldName names where a string lies in an event object.
func jsonFieldName(stack []jsonFrame, isKey bool, s string, tagN int) string {
	switch {
	case len(stack) == 1 && isKey:
		return "a field name"
	case len(stack) == 1:
		return stack[0].key
	case len(stack) == 2 && stack[0].key == "tags" && isKey:
		return fmt.Sprintf("tags: key %d", tagN+1)
	case len(stack) == 2 && stack[0].key == "tags":
		return fmt.Sprintf("tags: the value of %q", stack[1].key)
	}
	return "a string"
}

// jsonStringValid checks the raw text of one JSON string token (with the
// separators before it): valid UTF-8, and every \u escape of a surrogate
// half followed by the other half.
func jsonStringValid(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := bytes.IndexByte(raw, '"') + 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++
			continue
		}
		r, ok := hex4(raw[i+2:])
		switch {
		case !ok:
			return false
		case r >= 0xdc00 && r < 0xe000:
			return false // a low half with no high half before it
		case r >= 0xd800 && r < 0xdc00:
			if lo, ok := hex4(raw[min(i+8, len(raw)):]); i+7 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' || !ok || lo < 0xdc00 || lo >= 0xe000 {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
