package simulator

import (
	"encoding/gob"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"edgeflow/aggregate"
)

// Agg is an exact aggregate of event values.
type Agg struct {
	Count    uint64
	Sum      float64
	Min, Max float64
}

// Add adds one value.
func (a *Agg) Add(v float64) {
	if a.Count == 0 || v < a.Min {
		a.Min = v
	}
	if a.Count == 0 || v > a.Max {
		a.Max = v
	}
	a.Count++
	a.Sum += v
}

// Merge adds b's values.
func (a *Agg) Merge(b Agg) {
	if b.Count == 0 {
		return
	}
	if a.Count == 0 || b.Min < a.Min {
		a.Min = b.Min
	}
	if a.Count == 0 || b.Max > a.Max {
		a.Max = b.Max
	}
	a.Count += b.Count
	a.Sum += b.Sum
}

// Avg is Sum/Count (0 when empty).
func (a Agg) Avg() float64 {
	if a.Count == 0 {
		return 0
	}
	return a.Sum / float64(a.Count)
}

// BucketKey is one metric's base bucket: Bucket is the bucket start in
// Unix ns divided by the resolution.
type BucketKey struct {
	Metric string
	Bucket int64
}

// TimeSample is the true time of one event, for the event-time error check.
type TimeSample struct {
	Seq    uint64
	TrueNs int64
}

// DeviceTruth is what one device really produced. The device's worker
// owns it during the run; read it only after Fleet.Run returns.
type DeviceTruth struct {
	Device   string
	StreamID string
	// Appended is the last sequence number appended (sequences start at 1).
	Appended uint64
	// Buckets aggregate the events whose hub time the simulator can
	// predict (stamped trusted at capture), by metric and base bucket of
	// their true time.
	Buckets map[BucketKey]*Agg
	// Uncertain counts events whose hub window the simulator cannot
	// predict: captured while the agent's clock was not trusted (repaired
	// later or timed by the hub's estimate), or stamped across a bucket
	// boundary from their true time within the stamp's uncertainty. The
	// device's windows are then not verified.
	Uncertain uint64
	// Samples are the true times of every Nth event.
	Samples []TimeSample
}

func (d *DeviceTruth) add(metric string, trueNs int64, v float64, res time.Duration) {
	k := BucketKey{metric, floorDiv(trueNs, int64(res))}
	a := d.Buckets[k]
	if a == nil {
		a = &Agg{}
		d.Buckets[k] = a
	}
	a.Add(v)
}

// Truth is the ground truth of a run: every device's events, bucketed at
// the hub's resolution.
type Truth struct {
	Scenario   string
	Resolution time.Duration
	Metrics    []string
	// Windows are the window specs to verify (the scenario's).
	Windows []string
	Devices []*DeviceTruth
}

// Window is a verified window kind: tumbling or hopping, aligned to the
// Unix epoch as the hub aligns them.
type Window struct {
	Spec        string
	Size, Slide time.Duration
}

// ParseWindow reads a tumbling or hopping window spec in the hub's syntax
// (aggregate.ParseWindowSpec) and checks it is a multiple of res.
func ParseWindow(spec string, res time.Duration) (Window, error) {
	w, err := aggregate.ParseWindowSpec(spec)
	if err != nil {
		return Window{}, err
	}
	switch w.Kind {
	case aggregate.Tumbling:
		w.Slide = w.Size
	case aggregate.Hopping:
	default:
		return Window{}, fmt.Errorf("window %q: only tumbling and hopping windows are verified", spec)
	}
	if w.Size <= 0 || w.Size%res != 0 || w.Slide <= 0 || w.Slide%res != 0 {
		return Window{}, fmt.Errorf("window %q: size and slide must be positive multiples of the resolution %v", spec, res)
	}
	return Window{Spec: spec, Size: w.Size, Slide: w.Slide}, nil
}

// WindowKey is one window of one device.
type WindowKey struct {
	Device string
	Start  int64 // Unix ns
}

// Expected computes the exact aggregates the hub should report for metric
// in window w, grouped by device, for the devices whose windows are
// verifiable (no Uncertain events). unverifiable lists the others.
func (t *Truth) Expected(w Window, metric string) (exp map[WindowKey]Agg, unverifiable []string) {
	exp = make(map[WindowKey]Agg)
	res, size, slide := int64(t.Resolution), int64(w.Size), int64(w.Slide)
	for _, d := range t.Devices {
		if d.Uncertain > 0 {
			unverifiable = append(unverifiable, d.Device)
			continue
		}
		for k, a := range d.Buckets {
			if k.Metric != metric {
				continue
			}
			b := k.Bucket * res
			// Windows [s, s+size) with s a multiple of slide that hold b.
			for s := floorDiv(b, slide) * slide; s > b-size; s -= slide {
				key := WindowKey{d.Device, s}
				e := exp[key]
				e.Merge(*a)
				exp[key] = e
			}
		}
	}
	return exp, unverifiable
}

// Span returns the first and last bucket start (Unix ns) holding events.
func (t *Truth) Span() (first, last int64, ok bool) {
	first, last = math.MaxInt64, math.MinInt64
	for _, d := range t.Devices {
		for k := range d.Buckets {
			first, last = min(first, k.Bucket), max(last, k.Bucket)
		}
	}
	if first > last {
		return 0, 0, false
	}
	return first * int64(t.Resolution), last * int64(t.Resolution), true
}

// Events returns the number of events appended in total.
func (t *Truth) Events() uint64 {
	var n uint64
	for _, d := range t.Devices {
		n += d.Appended
	}
	return n
}

// Save writes the truth (gob) for a later `fleetsim verify`.
func (t *Truth) Save(w io.Writer) error { return gob.NewEncoder(w).Encode(t) }

// LoadTruth reads what Save wrote.
func LoadTruth(r io.Reader) (*Truth, error) {
	var t Truth
	if err := gob.NewDecoder(r).Decode(&t); err != nil {
		return nil, fmt.Errorf("simulator: read ground truth: %w", err)
	}
	slices.SortFunc(t.Devices, func(a, b *DeviceTruth) int { return cmpString(a.Device, b.Device) })
	return &t, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// nearBoundary reports whether t is within guard of a multiple of res.
func nearBoundary(tNs int64, res, guard time.Duration) bool {
	if guard <= 0 {
		return false
	}
	m := tNs - floorDiv(tNs, int64(res))*int64(res)
	return m < int64(guard) || int64(res)-m <= int64(guard)
}
