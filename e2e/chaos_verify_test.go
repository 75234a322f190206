//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"edgeflow/simulator"
)

// chaosWindowSpecs are the windows the chaos verdict compares, each a
// multiple of the hub's default 10 s resolution.
var chaosWindowSpecs = []string{"tumbling:10s", "tumbling:1m", "hopping:1m/20s"}

// chaosResolution is hubd's default aggregate resolution.
const chaosResolution = 10 * time.Second

// chaosSketchAccuracy is hubd's default sketch accuracy
// (aggregate.Options.SketchAccuracy): a reported quantile is within this
// relative error of the true value at its rank.
const chaosSketchAccuracy = 0.01

// chaosDevice is what the test knows about one agent: it stamps event seq
// (value seq) at ex.deviceTime(seq), so the ground truth needs no log.
type chaosDevice struct {
	device string
	count  uint64
	ex     agentExtras
}

// truthWindow is the exact content of one window of one device.
type truthWindow struct {
	values     []float64
	sum        float64
	lastNs     int64
	last       float64
	lastSeq    uint64
	device     string
	start      int64
	spec       string
	minV, maxV float64
	sorted     bool
	count      uint64
}

func (w *truthWindow) add(seq uint64, ts int64) {
	v := float64(seq)
	if w.count == 0 || v < w.minV {
		w.minV = v
	}
	if w.count == 0 || v > w.maxV {
		w.maxV = v
	}
	if w.count == 0 || ts > w.lastNs || (ts == w.lastNs && seq > w.lastSeq) {
		w.lastNs, w.last, w.lastSeq = ts, v, seq
	}
	w.count++
	w.sum += v
	w.values = append(w.values, v)
}

// quantileOK reports whether got is within the sketch's accuracy of the
// true value at rank q*(n-1) (the engine's rank; floor or ceil).
func (w *truthWindow) quantileOK(q, got float64) bool {
	if !w.sorted {
		slices.Sort(w.values)
		w.sorted = true
	}
	r := q * float64(len(w.values)-1)
	for _, i := range []int{int(math.Floor(r)), int(math.Ceil(r))} {
		x := w.values[i]
		if math.Abs(got-x) <= chaosSketchAccuracy*math.Abs(x)+1e-9 {
			return true
		}
	}
	return false
}

// hubWindow is one window of GET /v1/aggregates.
type hubWindow struct {
	Start         time.Time         `json:"start"`
	Group         map[string]string `json:"group"`
	Count         uint64            `json:"count"`
	Sum           float64           `json:"sum"`
	Min           float64           `json:"min"`
	Max           float64           `json:"max"`
	Last          *float64          `json:"last"`
	P50, P95, P99 *float64
}

// chaosVerdict is the window comparison of a chaos run.
type chaosVerdict struct {
	windows, mismatching int
	// perDevice counts compared and mismatching windows by device.
	perDevice map[string][2]int
	// simMatch and simMismatch are simulator.Verify's count of windows
	// (count, sum, min, max) that match and that do not.
	simMatch, simMismatch int
	examples              []string
}

// verifyChaosWindows computes every device's windows from the events it
// appended minus the gaps it reported (and the hub did not apply anyway),
// reads the hub's windows over HTTP and compares count, sum, min, max,
// last exactly and p50/p95/p99 within the sketch accuracy. It also runs
// the fleet simulator's verifier on the same ground truth.
func verifyChaosWindows(ctx context.Context, t testing.TB, h *hubProc, devs []chaosDevice) chaosVerdict {
	v := chaosVerdict{perDevice: map[string][2]int{}}
	count := func(device string, bad bool) {
		c := v.perDevice[device]
		c[0]++
		v.windows++
		if bad {
			c[1]++
			v.mismatching++
		}
		v.perDevice[device] = c
	}
	truth := &simulator.Truth{Scenario: "chaos", Resolution: chaosResolution, Metrics: []string{"e2e.value"}, Windows: chaosWindowSpecs}
	exp := map[string]map[[2]any]*truthWindow{} // spec -> (device, start) -> window
	var firstNs, lastNs int64 = math.MaxInt64, math.MinInt64
	for _, d := range devs {
		var dv struct {
			Streams []struct {
				StreamID string      `json:"stream_id"`
				Applied  [][2]uint64 `json:"applied"`
				Gaps     [][2]uint64 `json:"gaps"`
			} `json:"streams"`
		}
		if err := h.getJSON(ctx, "/v1/devices/"+d.device, &dv); err != nil {
			t.Fatal(err)
		}
		dt := &simulator.DeviceTruth{Device: d.device, Appended: d.count, Buckets: map[simulator.BucketKey]*simulator.Agg{}}
		truth.Devices = append(truth.Devices, dt)
		var applied, gaps [][2]uint64
		if len(dv.Streams) > 0 {
			dt.StreamID, applied, gaps = dv.Streams[0].StreamID, dv.Streams[0].Applied, dv.Streams[0].Gaps
		}
		for seq := uint64(1); seq <= d.count; seq++ {
			if inRanges(gaps, seq) && !inRanges(applied, seq) {
				continue // dropped by the agent and reported
			}
			ts := d.ex.deviceTime(seq)
			firstNs, lastNs = min(firstNs, ts), max(lastNs, ts)
			k := simulator.BucketKey{Metric: "e2e.value", Bucket: ts / int64(chaosResolution)}
			if dt.Buckets[k] == nil {
				dt.Buckets[k] = &simulator.Agg{}
			}
			dt.Buckets[k].Add(float64(seq))
			for _, spec := range chaosWindowSpecs {
				w, _ := simulator.ParseWindow(spec, chaosResolution)
				size, slide := int64(w.Size), int64(w.Slide)
				for s := ts / slide * slide; s > ts-size; s -= slide {
					if exp[spec] == nil {
						exp[spec] = map[[2]any]*truthWindow{}
					}
					key := [2]any{d.device, s}
					if exp[spec][key] == nil {
						exp[spec][key] = &truthWindow{device: d.device, start: s, spec: spec}
					}
					exp[spec][key].add(seq, ts)
				}
			}
		}
	}
	example := func(f string, a ...any) {
		if len(v.examples) < 10 {
			v.examples = append(v.examples, fmt.Sprintf(f, a...))
		}
	}
	for _, spec := range chaosWindowSpecs {
		got := fetchChaosWindows(ctx, t, h, spec, firstNs-int64(time.Hour), lastNs+int64(time.Hour))
		for key, w := range exp[spec] {
			g, ok := got[key]
			if !ok {
				count(w.device, true)
				example("%s %s %s: missing, want count %d", spec, w.device, time.Unix(0, w.start).UTC().Format(time.RFC3339), w.count)
				continue
			}
			why := w.differs(g)
			count(w.device, why != "")
			if why != "" {
				example("%s %s %s: %s", spec, w.device, time.Unix(0, w.start).UTC().Format(time.RFC3339), why)
			}
		}
		for key, g := range got {
			if _, ok := exp[spec][key]; !ok && g.Count > 0 {
				count(key[0].(string), true)
				example("%s %v: unexpected window, hub count %d", spec, key, g.Count)
			}
		}
	}
	rep, err := simulator.Verify(ctx, truth, simulator.VerifyOptions{HubURL: "http://" + h.httpAddr})
	if err != nil {
		t.Fatalf("simulator.Verify: %v", err)
	}
	for _, w := range rep.Windows {
		v.simMatch += w.Match
		v.simMismatch += w.Differ + w.Missing + w.Unexpected
		if !w.Available {
			v.simMismatch++
			example("simulator.Verify %s: %s", w.Window, w.Note)
		}
		for _, e := range w.Examples {
			example("simulator.Verify %s: %s", w.Window, e)
		}
	}
	return v
}

// differs says how the hub's window g differs from the truth ("" if not).
func (w *truthWindow) differs(g hubWindow) string {
	var d []string
	if g.Count != w.count {
		d = append(d, fmt.Sprintf("count %d want %d", g.Count, w.count))
	}
	if math.Abs(g.Sum-w.sum) > 1e-9*math.Max(1, math.Abs(w.sum)) {
		d = append(d, fmt.Sprintf("sum %g want %g", g.Sum, w.sum))
	}
	if g.Min != w.minV || g.Max != w.maxV {
		d = append(d, fmt.Sprintf("min/max %g/%g want %g/%g", g.Min, g.Max, w.minV, w.maxV))
	}
	if g.Last == nil || *g.Last != w.last {
		d = append(d, fmt.Sprintf("last %v want %g", ptrString(g.Last), w.last))
	}
	for _, q := range []struct {
		q   float64
		got *float64
	}{{0.5, g.P50}, {0.95, g.P95}, {0.99, g.P99}} {
		if q.got == nil || !w.quantileOK(q.q, *q.got) {
			d = append(d, fmt.Sprintf("p%g %v out of the sketch error", q.q*100, ptrString(q.got)))
		}
	}
	return strings.Join(d, ", ")
}

func ptrString(p *float64) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}

// fetchChaosWindows reads every device's windows of spec in [from, to).
func fetchChaosWindows(ctx context.Context, t testing.TB, h *hubProc, spec string, from, to int64) map[[2]any]hubWindow {
	q := url.Values{"metric": {"e2e.value"}, "window": {spec}, "group_by": {"device"},
		"aggs": {"count,sum,min,max,last,p50,p95,p99"},
		"from": {time.Unix(0, from).UTC().Format(time.RFC3339Nano)}, "to": {time.Unix(0, to).UTC().Format(time.RFC3339Nano)}}
	var resp struct {
		Windows []hubWindow `json:"windows"`
	}
	if err := h.getJSON(ctx, "/v1/aggregates?"+q.Encode(), &resp); err != nil {
		t.Fatal(err)
	}
	got := map[[2]any]hubWindow{}
	for _, w := range resp.Windows {
		got[[2]any{w.Group["device"], w.Start.UnixNano()}] = w
	}
	return got
}

func inRanges(rs [][2]uint64, seq uint64) bool {
	for _, r := range rs {
		if seq >= r[0] && seq <= r[1] {
			return true
		}
	}
	return false
}
