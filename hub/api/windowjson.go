package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// writeAggregates writes the body of GET /v1/aggregates: byte for byte
// what json.Encoder makes of head with its Windows set to
// hubapi.WindowsJSON(res, aggs), but streamed window by window through a
// buffer, with no WindowJSON, pointer or reflection per window. A day of
// 10 s windows is 8,640 of them, and encoding them through reflection
// took ten times as long as the query.
func writeAggregates(w http.ResponseWriter, head hubapi.AggregatesResponse, res []aggregate.WindowResult, aggs aggregate.Aggs) {
	w.Header().Set("Content-Type", "application/json")
	_ = encodeAggregates(w, head, res, aggs)
}

// encodeAggregates is writeAggregates' encoder, for tests.
func encodeAggregates(w io.Writer, head hubapi.AggregatesResponse, res []aggregate.WindowResult, aggs aggregate.Aggs) error {
	head.Windows = []hubapi.WindowJSON{}
	pre, err := json.Marshal(head)
	if err != nil {
		return err
	}
	pre = bytes.TrimSuffix(pre, []byte("[]}"))
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(pre)
	bw.WriteByte('[')
	var we windowEncoder
	for i := range res {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(we.append(&res[i], aggs))
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// windowEncoder appends one window's JSON; it reuses its buffer and the
// encoded group of the previous window (a group's windows share one map).
type windowEncoder struct {
	b         []byte
	lastGroup map[string]string
	group     []byte
}

func (e *windowEncoder) append(r *aggregate.WindowResult, a aggregate.Aggs) []byte {
	b := e.b[:0]
	b = append(b, `{"start":`...)
	b = appendTime(b, r.Start)
	b = append(b, `,"end":`...)
	b = appendTime(b, r.End)
	b = append(b, `,"start_ms":`...)
	b = strconv.AppendInt(b, r.Start.UnixMilli(), 10)
	b = append(b, `,"end_ms":`...)
	b = strconv.AppendInt(b, r.End.UnixMilli(), 10)
	b = append(b, `,"group":`...)
	b = append(b, e.groupJSON(r.Group)...)
	b = append(b, `,"count":`...)
	b = strconv.AppendUint(b, r.Count, 10)
	num := func(name string, agg aggregate.Aggs, v float64) {
		if a.Has(agg) && r.Count > 0 && !math.IsNaN(v) && !math.IsInf(v, 0) {
			b = append(b, ',', '"')
			b = append(b, name...)
			b = append(b, '"', ':')
			b = appendFloat(b, v)
		}
	}
	num("sum", aggregate.AggSum, r.Sum)
	num("min", aggregate.AggMin, r.Min)
	num("max", aggregate.AggMax, r.Max)
	num("avg", aggregate.AggAvg, r.Avg)
	num("last", aggregate.AggLast, r.Last)
	if a.Has(aggregate.AggLast) && r.Count > 0 && !math.IsNaN(r.Last) && !math.IsInf(r.Last, 0) {
		b = append(b, `,"last_time":`...)
		b = appendTime(b, r.LastTime)
	}
	num("p50", aggregate.AggP50, r.P50)
	num("p95", aggregate.AggP95, r.P95)
	num("p99", aggregate.AggP99, r.P99)
	b = append(b, `,"final":`...)
	b = strconv.AppendBool(b, r.Final)
	b = append(b, `,"revision":`...)
	b = strconv.AppendUint(b, r.Revision, 10)
	b = append(b, `,"late":`...)
	b = strconv.AppendUint(b, r.Late, 10)
	b = append(b, `,"behind":`...)
	b = strconv.AppendInt(b, int64(r.Behind), 10)
	b = append(b, '}')
	e.b = b
	return b
}

// groupJSON encodes a group's labels as encoding/json does (sorted keys;
// none is {}), once per run of windows with the same labels.
func (e *windowEncoder) groupJSON(g map[string]string) []byte {
	if e.group != nil && maps.Equal(g, e.lastGroup) {
		return e.group
	}
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := append(e.group[:0], '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, g[k])
	}
	e.group, e.lastGroup = append(b, '}'), g
	return e.group
}

// appendTime appends t as rfc3339 does, quoted.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendFloat appends f as encoding/json encodes a float64.
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-09 -> e-9, as encoding/json writes it
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString appends s as a JSON string, escaped as json.Encoder does
// (HTML characters included); anything beyond plain printable ASCII goes
// through encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
