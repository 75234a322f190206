package aggregate

import (
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// maxLateMarks bounds the late marks one partial keeps; beyond it marks
// fold into the newest, so revision counts become lower bounds.
const maxLateMarks = 32

// lateMark records late events merged into a partial by one Apply: n
// events arrived when the hub watermark was wm, in the Apply numbered
// apply. A window [s, e) counts them late when wm >= e + allowed lateness.
type lateMark struct {
	wm    int64
	apply uint64
	n     uint32
}

// partial is the mergeable state of one series over one base bucket (or,
// in a query, of one group over one or more buckets).
type partial struct {
	bucket     int64 // bucket index: start time / resolution
	count      uint64
	sum, comp  float64 // Neumaier-compensated sum: sum+comp
	min, max   float64
	firstT     int64 // earliest event time
	lastT      int64 // latest event time; lastV is its value
	lastV      float64
	lastSeq    uint64
	lastStream uint32
	shared     bool   // query accumulators: sk belongs to someone else
	guard      uint64 // batches with Seq <= guard are already included
	seq        uint64 // highest batch Seq that changed the partial
	sk         *ddsketch.DDSketch
	late       []lateMark
	// q holds p50, p95 and p99 of a stored partial decoded without its
	// sketch (see encodeStored); nil otherwise.
	q *[3]float64
}

func (p *partial) reset(bucket int64) {
	*p = partial{bucket: bucket, min: math.Inf(1), max: math.Inf(-1), firstT: math.MaxInt64, lastT: math.MinInt64}
}

// addSum adds v to the compensated sum.
func (p *partial) addSum(v float64) {
	t := p.sum + v
	if math.Abs(p.sum) >= math.Abs(v) {
		p.comp += (p.sum - t) + v
	} else {
		p.comp += (v - t) + p.sum
	}
	p.sum = t
}

// Sum returns the compensated sum.
func (p *partial) total() float64 { return p.sum + p.comp }

// observe adds one value at time t without the sketch or the last value.
func (p *partial) observe(v float64, t int64) {
	p.count++
	p.addSum(v)
	if v < p.min {
		p.min = v
	}
	if v > p.max {
		p.max = v
	}
	if t < p.firstT {
		p.firstT = t
	}
}

// addLate records one late event, folding it into the previous mark when
// it came in the same Apply at the same watermark.
func (p *partial) addLate(wm int64, apply uint64) {
	if n := len(p.late); n > 0 {
		m := &p.late[n-1]
		if (m.apply == apply && m.wm == wm) || n >= maxLateMarks {
			m.n++
			m.apply = max(m.apply, apply)
			return
		}
	}
	p.late = append(p.late, lateMark{wm: wm, apply: apply, n: 1})
}

// lastKey orders candidates for "last value": by event time, then by the
// stream's identity, then by sequence.
type lastKey struct {
	t      int64
	stream uint32
	seq    uint64
}

// sketches builds and recycles quantile sketches with one mapping.
type sketches struct {
	mapping mapping.IndexMapping
	maxBins int
	free    []*ddsketch.DDSketch
}

func newSketches(accuracy float64, maxBins int) (*sketches, error) {
	m, err := mapping.NewLogarithmicMapping(accuracy)
	if err != nil {
		return nil, err
	}
	return &sketches{mapping: m, maxBins: maxBins}, nil
}

func (s *sketches) store() store.Store { return newCompactStore(s.maxBins) }

func (s *sketches) get() *ddsketch.DDSketch {
	if n := len(s.free); n > 0 {
		sk := s.free[n-1]
		s.free = s.free[:n-1]
		return sk
	}
	return s.fresh()
}

// scratch returns a new sketch for a query to merge windows into and
// clear again (its stores keep their dense bins across Clear); it does
// not touch the pool, so concurrent queries may call it.
func (s *sketches) scratch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(s.mapping, &compactStore{maxBins: s.maxBins, keepDense: true},
		&compactStore{maxBins: s.maxBins, keepDense: true})
}

// fresh returns a new sketch without touching the pool (safe for
// concurrent readers).
func (s *sketches) fresh() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(s.mapping, s.store(), s.store())
}

// put recycles a sketch; at most 4096 are kept.
func (s *sketches) put(sk *ddsketch.DDSketch) {
	if sk != nil && len(s.free) < 4096 {
		sk.Clear()
		s.free = append(s.free, sk)
	}
}

func (s *sketches) decode(b []byte) (*ddsketch.DDSketch, error) {
	if len(b) == 0 {
		return s.fresh(), nil
	}
	return ddsketch.DecodeDDSketch(b, s.store, s.mapping)
}

// encodePartial appends p (sketch included) to e.
func encodePartial(e *encoder, p *partial) {
	encodePartialFields(e, p)
	var sk []byte
	if p.sk != nil {
		p.sk.Encode(&sk, true)
	}
	e.bytes(sk)
}

// encodePartialFields appends what encodePartial writes before the
// sketch's bytes.
func encodePartialFields(e *encoder, p *partial) {
	e.varint(p.bucket)
	e.uvarint(p.count)
	e.f64(p.sum)
	e.f64(p.comp)
	e.f64(p.min)
	e.f64(p.max)
	e.varint(p.firstT)
	e.varint(p.lastT)
	e.f64(p.lastV)
	e.uvarint(p.lastSeq)
	e.uvarint(uint64(p.lastStream))
	e.uvarint(p.guard)
	e.uvarint(p.seq)
	e.uvarint(uint64(len(p.late)))
	for _, m := range p.late {
		e.varint(m.wm)
		e.uvarint(m.apply)
		e.uvarint(uint64(m.n))
	}
}

// encodeStored appends p as the engine evicts it into the PartialStore:
// encodePartial followed by its p50, p95 and p99, so that a query whose
// windows are single partials answers quantiles without decoding sketches.
// Readers of encodePartial's format ignore the trailing quantiles.
func encodeStored(e *encoder, p *partial) {
	encodePartial(e, p)
	if p.sk != nil {
		q50, q95, q99 := quantiles(p.sk, p.min, p.max)
		e.f64(q50)
		e.f64(q95)
		e.f64(q99)
	}
}

// need is how much of a stored partial's quantile state a query decodes.
type need uint8

const (
	needNone      need = iota // no quantiles asked
	needQuantiles             // each window is one partial: its stored p50/p95/p99 do
	needSketch                // windows merge partials: decode the sketches
)

// decodeStored reads what encodeStored (or, for partials stored by older
// versions, encodePartial) wrote, decoding the sketch only when n asks for
// it, or asks for quantiles and the partial has none stored.
func decodeStored(d *decoder, sks *sketches, p *partial, n need, q *[3]float64) {
	skb := decodePartial(d, sks, p, n == needSketch)
	if d.err != nil || n != needQuantiles {
		return
	}
	if len(d.b) >= 24 {
		q[0], q[1], q[2] = d.f64(), d.f64(), d.f64()
		p.q = q
		return
	}
	if len(skb) == 0 {
		return
	}
	sk, err := sks.decode(skb)
	if err != nil {
		d.fail("sketch")
		return
	}
	p.sk = sk
}

// decodePartial reads what encodePartial wrote; without sketch the
// sketch bytes are skipped (queries that want no quantiles) and returned.
func decodePartial(d *decoder, sks *sketches, p *partial, sketch bool) (skb []byte) {
	p.bucket = d.varint()
	p.count = d.uvarint()
	p.sum, p.comp, p.min, p.max = d.f64(), d.f64(), d.f64(), d.f64()
	p.firstT, p.lastT = d.varint(), d.varint()
	p.lastV = d.f64()
	p.lastSeq = d.uvarint()
	p.lastStream = uint32(d.uvarint())
	p.guard, p.seq = d.uvarint(), d.uvarint()
	if n := d.count(3); n > 0 {
		p.late = make([]lateMark, n)
		for i := range p.late {
			p.late[i] = lateMark{wm: d.varint(), apply: d.uvarint(), n: uint32(d.uvarint())}
		}
	}
	skb = d.bytes()
	if d.err != nil || !sketch {
		return skb
	}
	sk, err := sks.decode(skb)
	if err != nil {
		d.fail("sketch")
		return nil
	}
	p.sk = sk
	return nil
}
