package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
)

// TestWindowJSONMatchesEncodingJSON: the streamed /v1/aggregates body is
// byte for byte what encoding/json makes of the same response, for random
// windows with awkward values (NaN, infinities, tiny and huge floats,
// negative zero), awkward labels and every aggregate subset.
func TestWindowJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	floats := []float64{0, math.Copysign(0, -1), 1, -2.5, 1e-7, -3.2e-9, 1e21, 1.7e300, 123456789.125, 1.0 / 3,
		math.NaN(), math.Inf(1), math.Inf(-1), 5e-324, math.MaxFloat64}
	labels := []string{"", "pump-7", "a<b>&c", "x<y", "r&d", "p>q", `quo"te\`, "tab\tnew\nline", "ünïcødé", "\u2028", "\x00\x7f", "emoji 🚀"}
	f := func() float64 {
		if r.IntN(3) == 0 {
			return (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(40)-20))
		}
		return floats[r.IntN(len(floats))]
	}
	for trial := 0; trial < 300; trial++ {
		var groups []map[string]string
		for g := 0; g < 1+r.IntN(3); g++ {
			var m map[string]string
			if r.IntN(4) > 0 {
				m = map[string]string{}
				for k := 0; k < r.IntN(3); k++ {
					m[labels[r.IntN(len(labels))]] = labels[r.IntN(len(labels))]
				}
			}
			groups = append(groups, m)
		}
		aggs := aggregate.Aggs(r.IntN(int(aggregate.AllAggs) + 1))
		if aggs == 0 {
			aggs = aggregate.AllAggs
		}
		var res []aggregate.WindowResult
		for i := 0; i < r.IntN(20); i++ {
			start := time.Unix(0, r.Int64N(4e18)-2e18).Add(time.Duration(r.IntN(2)) * time.Hour)
			res = append(res, aggregate.WindowResult{Start: start, End: start.Add(time.Duration(r.Int64N(1e12))), Group: groups[r.IntN(len(groups))],
				Count: uint64(r.IntN(3)) * r.Uint64N(1<<40), Sum: f(), Min: f(), Max: f(), Avg: f(), Last: f(), LastTime: start.Add(time.Duration(r.Int64N(1e9))),
				P50: f(), P95: f(), P99: f(), Final: r.IntN(2) == 0, Revision: r.Uint64(), Late: r.Uint64N(100), Behind: r.IntN(5) - 1})
		}
		head := hubapi.AggregatesResponse{Metric: labels[r.IntN(len(labels))], Window: "tumbling:10s", From: "2025-06-01T00:00:00Z", To: "2025-06-02T00:00:00Z", Aggs: aggs.Names()}
		want := head
		want.Windows = hubapi.WindowsJSON(res, aggs)
		var wb, gb bytes.Buffer
		if err := json.NewEncoder(&wb).Encode(want); err != nil {
			t.Fatal(err)
		}
		if err := encodeAggregates(&gb, head, res, aggs); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wb.Bytes(), gb.Bytes()) {
			t.Fatalf("trial %d:\nencoding/json: %s\nstreamed:      %s", trial, wb.Bytes(), gb.Bytes())
		}
	}
}
