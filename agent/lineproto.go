package agent

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"edgeflow/wire/wirepb"
)

// parseLineProtocol parses one line of InfluxDB line protocol,
//
//	measurement[,tag=value...] field=value[,field=value...] [unix-ns]
//
// into one point per numeric field: floats, integers (42i), unsigned
// integers (42u) and booleans (t/f/true/false, as 1 and 0). String fields
// are skipped and counted in skipped; a line with no numeric field is an
// error. A field named "value" gives the metric measurement, any other
// measurement.field. Commas, spaces and equals signs are escaped with a
// backslash as line protocol specifies. Blank lines and # comments give
// nothing.
func parseLineProtocol(line []byte) (pts []point, skipped int, err error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return nil, 0, nil
	}
	s := string(line)
	keyEnd := indexUnescaped(s, ' ', false)
	if keyEnd < 0 {
		return nil, 0, fmt.Errorf("%w: no fields (want measurement[,tags] field=value [timestamp])", ErrBadEvent)
	}
	key, rest := s[:keyEnd], strings.TrimLeft(s[keyEnd+1:], " ")
	fieldsEnd := indexUnescaped(rest, ' ', true)
	fields, tsText := rest, ""
	if fieldsEnd >= 0 {
		fields, tsText = rest[:fieldsEnd], strings.TrimSpace(rest[fieldsEnd+1:])
	}
	keyParts := splitUnescaped(key, ',', false)
	measurement := unescape(keyParts[0])
	if measurement == "" {
		return nil, 0, fmt.Errorf("%w: empty measurement", ErrBadEvent)
	}
	tags := make([]*wirepb.Tag, 0, len(keyParts)-1)
	for _, kv := range keyParts[1:] {
		k, v, ok := cutUnescaped(kv, '=')
		if !ok || k == "" || v == "" {
			return nil, 0, fmt.Errorf("%w: tag %q is not key=value", ErrBadEvent, kv)
		}
		tags = append(tags, &wirepb.Tag{Key: unescape(k), Value: unescape(v)})
	}
	var ts time.Time
	if tsText != "" {
		ns, err := strconv.ParseInt(tsText, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: timestamp %q is not integer Unix nanoseconds", ErrBadEvent, tsText)
		}
		ts = time.Unix(0, ns)
	}
	hasTS := tsText != ""
	for _, f := range splitUnescaped(fields, ',', true) {
		k, v, ok := cutUnescaped(f, '=')
		if !ok || k == "" || v == "" {
			return nil, 0, fmt.Errorf("%w: field %q is not key=value", ErrBadEvent, f)
		}
		if v[0] == '"' {
			skipped++
			continue
		}
		val, err := fieldValue(v)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: field %q: %v", ErrBadEvent, unescape(k), err)
		}
		metric := measurement
		if name := unescape(k); name != "value" {
			metric += "." + name
		}
		p := point{metric: metric, value: val, ts: ts, hasTS: hasTS, tags: tags}
		if err := checkPoint(&p); err != nil {
			return nil, 0, err
		}
		pts = append(pts, p)
	}
	if len(pts) == 0 {
		return nil, skipped, fmt.Errorf("%w: no numeric field", ErrBadEvent)
	}
	return pts, skipped, nil
}

// fieldValue parses a non-string field value.
func fieldValue(v string) (float64, error) {
	switch v {
	case "t", "T", "true", "True", "TRUE":
		return 1, nil
	case "f", "F", "false", "False", "FALSE":
		return 0, nil
	}
	switch v[len(v)-1] {
	case 'i':
		n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not an integer", v)
		}
		return float64(n), nil
	case 'u':
		n, err := strconv.ParseUint(v[:len(v)-1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not an unsigned integer", v)
		}
		return float64(n), nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a finite number", v)
	}
	return f, nil
}

// indexUnescaped returns the index of the first sep in s that no backslash
// escapes (and, with quotes, that is outside a double-quoted string), or -1.
func indexUnescaped(s string, sep byte, quotes bool) int {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case quotes && c == '"':
			inQuote = !inQuote
		case c == sep && !inQuote:
			return i
		}
	}
	return -1
}

// splitUnescaped splits s at every unescaped sep (see indexUnescaped).
func splitUnescaped(s string, sep byte, quotes bool) []string {
	var parts []string
	for {
		i := indexUnescaped(s, sep, quotes)
		if i < 0 {
			return append(parts, s)
		}
		parts = append(parts, s[:i])
		s = s[i+1:]
	}
}

// cutUnescaped cuts s around its first unescaped sep.
func cutUnescaped(s string, sep byte) (before, after string, ok bool) {
	i := indexUnescaped(s, sep, false)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// unescape removes the backslash before an escaped comma, space, equals
// sign, quote or backslash; other backslashes stay, as line protocol says.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`, ="\`, s[i+1]) >= 0 {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
