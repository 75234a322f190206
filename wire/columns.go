package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// The columnar batch body (CodecColumns). A batch's events are written
// column by column instead of event by event: strings once in a table,
// tag lists once in a table of tag sets, times as deltas of deltas, values
// as scaled decimals when they are. A batch of sensor readings comes out
// smaller than zstd makes the protobuf body, and both ends spend a fraction
// of zstd's CPU on it. Layout, every number an unsigned varint unless noted:
//
//	version (1 byte, 1)
//	header length, header (the Batch's protobuf fields other than events)
//	event count n
//	string count, then per string: length, bytes
//	tag set count, then per set: tag count, then per tag: key, value (string indexes)
//	column metric (string index), tag set (set index), boot id (string index),
//	  method (the raw enum varint), device time (zigzag delta of delta),
//	  mono (zigzag of its delta minus device time's delta), offset and
//	  uncertainty (zigzag delta): each an integer column
//	value column: mode byte; 0: n little-endian float64s; 1: a byte k <= 15
//	  and an integer column of zigzag deltas of value·10^k
//
// An integer column is a mode byte then, for mode 0, n numbers; for mode 1,
// a run count and per run a number and its length (at least 1, summing to
// n). Deltas start from zero and wrap around like int64 arithmetic.
const colsVersion = 1

// Column modes.
const (
	colPlain   = 0
	colRuns    = 1
	valRaw     = 0
	valDecimal = 1
	maxDecimal = 15
)

// pow10 holds the exact powers of ten a decimal value column scales by.
var pow10 = [maxDecimal + 1]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// colEncoder holds one batch's columns while it is encoded; encoders are
// pooled so their tables and slices are reused from batch to batch.
type colEncoder struct {
	hdr     []byte
	strs    map[string]uint32
	strList [][]byte
	sets    map[string]uint32
	setData []uint32 // per set: its tag count, then key, value per tag
	nSets   int
	ints    [icCount][]uint64 // metric, tag set, boot, method, time, mono, offset, uncertainty
	values  []float64
	scaled  []uint64
	lastTag []byte // the previous event's tag fields and set, the common case
	lastSet uint32
	metrics strCache
	boots   strCache
}

// Integer column indexes in colEncoder.ints and Columns' layout order.
const (
	icMetric = iota
	icTagSet
	icBoot
	icMethod
	icTime
	icMono
	icOffset
	icUnc
	icCount
)

var colEncoders = sync.Pool{New: func() any {
	return &colEncoder{strs: make(map[string]uint32), sets: make(map[string]uint32)}
}}

func (c *colEncoder) reset() {
	c.hdr = c.hdr[:0]
	clear(c.strs)
	clear(c.sets)
	c.strList = c.strList[:0]
	c.setData = c.setData[:0]
	c.nSets = 0
	for i := range c.ints {
		c.ints[i] = c.ints[i][:0]
	}
	c.values = c.values[:0]
	c.lastTag = nil
	c.metrics, c.boots = strCache{}, strCache{}
}

// str returns the table index of s, adding it if new.
func (c *colEncoder) str(s []byte) uint32 {
	if i, ok := c.strs[string(s)]; ok {
		return i
	}
	i := uint32(len(c.strList))
	c.strs[string(s)] = i
	c.strList = append(c.strList, s)
	return i
}

// tagSet returns the set index of an event's tag fields (the raw, adjacent
// field-3 entries of the Event), adding the set if new. ok is false when a
// tag holds something other than one key and one value.
func (c *colEncoder) tagSet(raw []byte) (uint32, bool) {
	if c.lastTag != nil && bytes.Equal(raw, c.lastTag) {
		return c.lastSet, true
	}
	if i, ok := c.sets[string(raw)]; ok {
		c.lastTag, c.lastSet = raw, i
		return i, true
	}
	at := len(c.setData)
	c.setData = append(c.setData, 0)
	for b := raw; len(b) > 0; {
		_, _, n := protowire.ConsumeTag(b) // checked by the event parser
		tag, m := protowire.ConsumeBytes(b[n:])
		b = b[n+m:]
		var kv [2][]byte
		var seen [2]bool
		for len(tag) > 0 {
			num, typ, n := protowire.ConsumeTag(tag)
			if n < 0 || typ != protowire.BytesType || (num != 1 && num != 2) || seen[num-1] {
				return 0, false
			}
			v, m := protowire.ConsumeBytes(tag[n:])
			if m < 0 {
				return 0, false
			}
			kv[num-1], seen[num-1] = v, true
			tag = tag[n+m:]
		}
		c.setData[at]++
		c.setData = append(c.setData, c.str(kv[0]), c.str(kv[1]))
	}
	i := uint32(c.nSets)
	c.nSets++
	c.sets[string(raw)] = i
	c.lastTag, c.lastSet = raw, i
	return i, true
}

// event parses one protobuf Event and appends it to the columns. It
// reports false for anything the columns cannot carry exactly (an unknown
// field, a field of the wrong wire type, a singular field given twice,
// tags that are not adjacent) and for field tags longer than a byte, which
// no encoder writes for these fields; the batch then goes as protobuf.
func (c *colEncoder) event(b []byte) bool {
	e := eventScan{b: b, tagLo: -1, tagHi: -1}
	e.inOrder()
	for e.pos < len(b) {
		if !e.field() {
			return false
		}
	}
	var raw []byte
	if e.tagLo >= 0 {
		raw = b[e.tagLo:e.tagHi]
	}
	set, ok := c.tagSet(raw)
	if !ok {
		return false
	}
	c.ints[icMetric] = append(c.ints[icMetric], uint64(c.metrics.index(c, e.metric)))
	c.ints[icTagSet] = append(c.ints[icTagSet], uint64(set))
	c.ints[icBoot] = append(c.ints[icBoot], uint64(c.boots.index(c, e.boot)))
	c.ints[icMethod] = append(c.ints[icMethod], e.method)
	c.ints[icTime] = append(c.ints[icTime], e.tm)
	c.ints[icMono] = append(c.ints[icMono], e.mono)
	c.ints[icOffset] = append(c.ints[icOffset], e.off)
	c.ints[icUnc] = append(c.ints[icUnc], e.unc)
	c.values = append(c.values, math.Float64frombits(e.value))
	return true
}

// eventScan reads one protobuf Event for the columns encoder: the fields
// it has seen, and each field's value (zero when absent, as proto3 has it).
type eventScan struct {
	b                          []byte
	pos                        int
	seen                       uint16 // a bit per field number
	metric, boot               []byte
	tagLo, tagHi               int // the adjacent tags, b[tagLo:tagHi]; -1 none
	value                      uint64
	tm, mono, off, unc, method uint64
}

// str takes a string field with the one-byte tag at pos, shorter than 128
// bytes; nil when the next field is not one.
func (e *eventScan) str(tag byte) []byte {
	b, pos := e.b, e.pos
	if pos+1 < len(b) && b[pos] == tag && b[pos+1] < 0x80 && int(b[pos+1]) <= len(b)-pos-2 {
		l := int(b[pos+1])
		v := b[pos+2 : pos+2+l : pos+2+l]
		e.seen |= 1 << (tag >> 3)
		e.pos += 2 + l
		return v
	}
	return nil
}

// num takes a varint field with the one-byte tag at pos; 0 when the next
// field is not one.
func (e *eventScan) num(tag byte) uint64 {
	if e.pos+1 < len(e.b) && e.b[e.pos] == tag {
		if v, m := uvarintAt(e.b, e.pos+1); m > 0 {
			e.seen |= 1 << (tag >> 3)
			e.pos += 1 + m
			return v
		}
	}
	return 0
}

// inOrder is the fast path: fields in number order, as protobuf encoders
// write them, read in a straight line; whatever it leaves takes field.
func (e *eventScan) inOrder() {
	b := e.b
	e.metric = e.str(FieldEventMetric<<3 | 2)
	if len(b)-e.pos >= 9 && b[e.pos] == FieldEventValue<<3|1 {
		e.value = binary.LittleEndian.Uint64(b[e.pos+1:])
		e.seen |= 1 << FieldEventValue
		e.pos += 9
	}
	if e.pos < len(b) && b[e.pos] == FieldEventTags<<3|2 {
		e.tagLo = e.pos
		for e.str(FieldEventTags<<3|2) != nil { // a match is never nil, empty or not
		}
		e.tagHi = e.pos
	}
	e.tm, e.mono = e.num(FieldEventDeviceTime<<3), e.num(FieldEventMono<<3)
	e.boot = e.str(FieldEventBootID<<3 | 2)
	e.off, e.unc, e.method = e.num(FieldEventOffset<<3), e.num(FieldEventUncertainty<<3), e.num(FieldEventMethod<<3)
}

// field reads the field at pos in any order; false for anything the
// columns cannot carry exactly (see colEncoder.event).
func (e *eventScan) field() bool {
	b, pos := e.b, e.pos
	t := b[pos]
	num := t >> 3
	if t >= 0x80 || num == 0 || num > FieldEventLast || (num != FieldEventTags && e.seen&(1<<num) != 0) {
		return false
	}
	e.seen |= 1 << num
	start := pos
	pos++
	switch t {
	case FieldEventMetric<<3 | 2, FieldEventTags<<3 | 2, FieldEventBootID<<3 | 2:
		l, m := uvarintAt(b, pos)
		if m <= 0 || l > uint64(len(b)-pos-m) {
			return false
		}
		pos += m
		v := b[pos : pos+int(l) : pos+int(l)]
		pos += int(l)
		switch num {
		case FieldEventMetric:
			e.metric = v
		case FieldEventBootID:
			e.boot = v
		case FieldEventTags:
			if e.tagLo < 0 {
				e.tagLo = start
			} else if e.tagHi != start {
				return false
			}
			e.tagHi = pos
		}
	case FieldEventValue<<3 | 1:
		if len(b)-pos < 8 {
			return false
		}
		e.value = binary.LittleEndian.Uint64(b[pos:])
		pos += 8
	case FieldEventDeviceTime << 3, FieldEventMono << 3, FieldEventOffset << 3, FieldEventUncertainty << 3, FieldEventMethod << 3:
		v, m := uvarintAt(b, pos)
		if m <= 0 {
			return false
		}
		pos += m
		switch num {
		case FieldEventDeviceTime:
			e.tm = v
		case FieldEventMono:
			e.mono = v
		case FieldEventOffset:
			e.off = v
		case FieldEventUncertainty:
			e.unc = v
		case FieldEventMethod:
			e.method = v
		}
	default:
		return false // a known field with the wrong wire type
	}
	e.pos = pos
	return true
}

// uvarintAt decodes the varint at b[pos:]; m <= 0 means malformed or
// truncated.
func uvarintAt(b []byte, pos int) (v uint64, m int) {
	if pos < len(b) && b[pos] < 0x80 {
		return uint64(b[pos]), 1
	}
	if pos >= len(b) {
		return 0, -1
	}
	return protowire.ConsumeVarint(b[pos:]) // unrolled; m < 0 on error
}

// strCache remembers the last few strings of one column and their table
// indexes: a device's events cycle through a handful of metric names, and
// comparing a few short strings is cheaper than hashing one.
type strCache struct {
	s    [8][]byte
	idx  [8]uint32
	n    int
	next int
}

// index returns the table index of s, through the cache.
func (sc *strCache) index(c *colEncoder, s []byte) uint32 {
	for i := range sc.n {
		if string(sc.s[i]) == string(s) {
			return sc.idx[i]
		}
	}
	i := c.str(s)
	sc.s[sc.next], sc.idx[sc.next] = s, i
	sc.next = (sc.next + 1) % len(sc.s)
	sc.n = max(sc.n, sc.next)
	if sc.next == 0 {
		sc.n = len(sc.s)
	}
	return i
}

// zigzag maps a signed delta to an unsigned varint's domain.
func zigzag(d uint64) uint64 { return d<<1 ^ uint64(int64(d)>>63) }

// unzigzag undoes zigzag.
func unzigzag(z uint64) uint64 { return z>>1 ^ -(z & 1) }

// deltas rewrites the time columns in place as the layout describes.
func (c *colEncoder) deltas() {
	tm, mono := c.ints[icTime], c.ints[icMono]
	var prevT, prevD, prevM uint64
	for i, t := range tm {
		d := t - prevT
		m := mono[i]
		tm[i] = zigzag(d - prevD)
		mono[i] = zigzag((m - prevM) - d)
		prevT, prevD, prevM = t, d, m
	}
	for _, col := range [...][]uint64{c.ints[icOffset], c.ints[icUnc]} {
		prev := uint64(0)
		for i, v := range col {
			col[i], prev = zigzag(v-prev), v
		}
	}
}

// decimals finds the smallest k for which every value is an integer over
// 10^k that divides back to exactly the same float64, and fills c.scaled
// with the zigzag deltas of those integers. ok is false when there is none
// (a value with many digits, an infinity, a NaN, a negative zero).
func (c *colEncoder) decimals() (k int, ok bool) {
	c.scaled = c.scaled[:0]
	for i := 0; i < len(c.values); {
		m, exact := scaleExact(c.values[i], k)
		if exact {
			c.scaled = append(c.scaled, uint64(m))
			i++
			continue
		}
		// A finer scale, for this value and every one before it (rare: a
		// batch's values mostly share theirs).
		if k++; k > maxDecimal {
			return 0, false
		}
		c.scaled, i = c.scaled[:0], 0
	}
	prev := uint64(0)
	for i, m := range c.scaled {
		c.scaled[i], prev = zigzag(m-prev), m
	}
	return k, true
}

// scaleExact returns v·10^k as an integer if dividing it by 10^k gives
// back v bit for bit.
func scaleExact(v float64, k int) (int64, bool) {
	s := math.Round(v * pow10[k])
	if !(s >= -(1<<53) && s <= 1<<53) {
		return 0, false
	}
	m := int64(s)
	return m, math.Float64bits(float64(m)/pow10[k]) == math.Float64bits(v)
}

// appendIntColumn appends col in whichever mode is shorter.
func appendIntColumn(dst []byte, col []uint64) []byte {
	runs := 0
	for i := range col {
		if i == 0 || col[i] != col[i-1] {
			runs++
		}
	}
	if 2*runs >= len(col) {
		dst = append(dst, colPlain)
		for _, v := range col {
			dst = binary.AppendUvarint(dst, v)
		}
		return dst
	}
	dst = append(dst, colRuns)
	dst = binary.AppendUvarint(dst, uint64(runs))
	for i := 0; i < len(col); {
		j := i + 1
		for j < len(col) && col[j] == col[i] {
			j++
		}
		dst = binary.AppendUvarint(dst, col[i])
		dst = binary.AppendUvarint(dst, uint64(j-i))
		i = j
	}
	return dst
}

// appendColumns appends the columnar form of the protobuf Batch body to
// dst. ok is false when some part of it has no exact columnar form; the
// caller then sends the protobuf body.
func appendColumns(dst, body []byte) (out []byte, ok bool) {
	c := colEncoders.Get().(*colEncoder)
	defer colEncoders.Put(c)
	c.reset()
	for b := body; len(b) > 0; {
		if b[0] == FieldBatchEvents<<3|2 { // the common case, inline
			if l, m := uvarintAt(b, 1); m > 0 && l <= uint64(len(b)-1-m) {
				if !c.event(b[1+m : 1+m+int(l)]) {
					return dst, false
				}
				b = b[1+m+int(l):]
				continue
			}
		}
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return dst, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return dst, false
		}
		if num == FieldBatchEvents {
			ev, k := protowire.ConsumeBytes(b[n:])
			if typ != protowire.BytesType || k < 0 || !c.event(ev) {
				return dst, false
			}
		} else {
			c.hdr = append(c.hdr, b[:n+m]...)
		}
		b = b[n+m:]
	}
	out = append(dst, colsVersion)
	out = binary.AppendUvarint(out, uint64(len(c.hdr)))
	out = append(out, c.hdr...)
	return c.appendChunk(out), true
}

// appendChunk appends the part of a columnar body after its header: the
// event count, the tables and the columns of the events added to c.
func (c *colEncoder) appendChunk(out []byte) []byte {
	c.deltas()
	out = binary.AppendUvarint(out, uint64(len(c.values)))
	out = binary.AppendUvarint(out, uint64(len(c.strList)))
	for _, s := range c.strList {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	out = binary.AppendUvarint(out, uint64(c.nSets))
	for _, v := range c.setData {
		out = binary.AppendUvarint(out, uint64(v))
	}
	for _, col := range c.ints {
		out = appendIntColumn(out, col)
	}
	if k, ok := c.decimals(); ok {
		out = append(out, valDecimal, byte(k))
		out = appendIntColumn(out, c.scaled)
	} else {
		out = append(out, valRaw)
		for _, v := range c.values {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	}
	return out
}

// ColumnTag is one tag of a tag set: indexes into Columns.Strings.
type ColumnTag struct{ Key, Value uint32 }

// Columns is a decoded columnar batch body. Its byte slices point into
// the body; its slices are reused by the next Decode.
type Columns struct {
	// Header is the Batch's protobuf fields other than its events.
	Header []byte
	// Strings is the batch's string table.
	Strings [][]byte
	// SetStart delimits the tag sets: set i is Tags[SetStart[i]:SetStart[i+1]].
	SetStart []int32
	// Tags are the tag sets' tags.
	Tags []ColumnTag
	// Per event: metric and boot id (indexes into Strings), tag set, the
	// raw method varint, and the time fields and value as in Event.
	Metric, TagSet, Boot            []uint32
	Method                          []uint64
	Time, Mono, Offset, Uncertainty []int64
	Value                           []float64
}

// Len is the number of events.
func (c *Columns) Len() int { return len(c.Value) }

// colReader reads a columnar body, remembering the first error.
type colReader struct {
	b   []byte
	err error
}

func (r *colReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: columnar batch: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (r *colReader) uvarint(what string) uint64 { return r.uvarintOf(what, "") }

// uvarintOf reads a varint named what+part in an error; the two are kept
// apart so that a read that goes well does not build the name.
func (r *colReader) uvarintOf(what, part string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint in %s%s", what, part)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count that the remaining bytes must be able to hold at
// one byte per item at least (so it bounds allocation by the body size).
func (r *colReader) count(what string) int { return r.countOf(what, "") }

// countOf is count named what+part, as uvarintOf.
func (r *colReader) countOf(what, part string) int {
	v := r.uvarintOf(what, part)
	if r.err == nil && v > uint64(len(r.b)) {
		r.fail("%s%s of %d exceeds the %d bytes left", what, part, v, len(r.b))
		return 0
	}
	return int(v)
}

func (r *colReader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.fail("%s of %d bytes runs past the end", what, n)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *colReader) byte1(what string) byte {
	if b := r.bytes(1, what); len(b) == 1 {
		return b[0]
	}
	return 0
}

// intColumn reads an integer column of n numbers into dst[:0], each below
// limit (negative: any).
func (r *colReader) intColumn(dst []uint64, n int, limit int, what string) []uint64 {
	return readIntColumn(r, dst, n, limit, what)
}

// highBits and lowBytes pick out each byte's high and low bit of a word:
// a word w holds eight one-byte varints when w&highBits is 0, and each of
// them is below a limit of at most 0x80 when adding lowBytes*(0x80-limit)
// sets no high bit (no byte can carry into the next: 0x7f+0x80 < 0x100).
const (
	highBits = 0x8080808080808080
	lowBytes = 0x0101010101010101
)

// readIntColumn is intColumn into a slice of T; a column read as uint32
// must have a limit (its numbers are table indexes), which its numbers are
// checked against before they are narrowed.
func readIntColumn[T uint32 | uint64](r *colReader, dst []T, n int, limit int, what string) []T {
	dst = dst[:0]
	mode := r.byte1(what)
	if r.err != nil {
		return dst
	}
	bad := func(v uint64) bool { return limit >= 0 && v >= uint64(limit) }
	switch mode {
	case colPlain:
		b := r.b
		if n > len(b) { // a number takes a byte at least
			r.fail("%s of %d numbers runs past the end", what, n)
			return dst
		}
		dst = slices.Grow(dst, n)[:n]
		for i := 0; i < n; {
			var v uint64
			if len(b) >= 8 {
				// Eight one-byte numbers at once, the common case of a
				// delta column; a word holding a longer number, or one the
				// limit refuses, goes the one-number way below.
				w := binary.LittleEndian.Uint64(b)
				if w&highBits == 0 && n-i >= 8 && (limit < 0 || limit > 0x80 || (w+lowBytes*uint64(0x80-limit))&highBits == 0) {
					d := dst[i : i+8 : i+8]
					d[0], d[1], d[2], d[3] = T(byte(w)), T(byte(w>>8)), T(byte(w>>16)), T(byte(w>>24))
					d[4], d[5], d[6], d[7] = T(byte(w>>32)), T(byte(w>>40)), T(byte(w>>48)), T(byte(w>>56))
					b, i = b[8:], i+8
					continue
				}
			}
			if len(b) == 0 {
				r.fail("%s of %d numbers runs past the end", what, n)
				return dst[:0]
			}
			switch {
			case b[0] < 0x80:
				v, b = uint64(b[0]), b[1:]
			case len(b) >= 2 && b[1] < 0x80:
				v, b = uint64(b[0]&0x7f)|uint64(b[1])<<7, b[2:]
			case len(b) >= 3 && b[2] < 0x80:
				v, b = uint64(b[0]&0x7f)|uint64(b[1]&0x7f)<<7|uint64(b[2])<<14, b[3:]
			default:
				k := 0
				if v, k = protowire.ConsumeVarint(b); k <= 0 { // unrolled, unlike binary.Uvarint
					r.fail("bad varint in %s", what)
					return dst[:0]
				}
				b = b[k:]
			}
			if bad(v) {
				r.fail("%s index %d is out of range (%d entries)", what, v, limit)
				return dst[:0]
			}
			dst[i] = T(v)
			i++
		}
		r.b = b
	case colRuns:
		runs := r.countOf(what, " runs")
		dst = slices.Grow(dst, n)[:n]
		at := 0
		for range runs {
			v, l := r.uvarint(what), r.uvarintOf(what, " run length")
			if r.err != nil {
				return dst[:0]
			}
			if l == 0 || l > uint64(n-at) {
				r.fail("%s has a run of %d where %d events are left", what, l, n-at)
				return dst[:0]
			}
			if bad(v) {
				r.fail("%s index %d is out of range (%d entries)", what, v, limit)
				return dst[:0]
			}
			fill(dst[at:at+int(l)], T(v))
			at += int(l)
		}
		if at != n {
			r.fail("%s runs cover %d of %d events", what, at, n)
			return dst[:0]
		}
	default:
		r.fail("%s has unknown mode %d", what, mode)
	}
	return dst
}

// fill sets every element of s to v, doubling a filled prefix with copy
// (a memmove) instead of storing one element at a time.
func fill[T any](s []T, v T) {
	if len(s) == 0 {
		return
	}
	s[0] = v
	for k := 1; k < len(s); k *= 2 {
		copy(s[k:], s[:k])
	}
}

// colScratch holds an integer column between reading and expanding it.
var colScratch = sync.Pool{New: func() any { return new([]uint64) }}

// Decode reads a columnar batch body into c, bounding every count by lim
// and by the body's size, and every index by its table. It checks that the
// batch, written as protobuf, would fit lim.MaxBodyBytes, so a small body
// cannot stand for a huge batch.
func (c *Columns) Decode(body []byte, lim Limits) error {
	lim = lim.withDefaults()
	c.Value = c.Value[:0] // Len is 0 unless the whole body decodes
	r := &colReader{b: body}
	if v := r.byte1("version"); r.err == nil && v != colsVersion {
		return fmt.Errorf("%w: columnar batch version %d (this build reads %d)", ErrVersion, v, colsVersion)
	}
	c.Header = r.bytes(r.count("header length"), "header")
	if r.err == nil {
		err := scanFields(c.Header, func(num protowire.Number, _ protowire.Type, _ []byte) error {
			if num == FieldBatchEvents {
				return fmt.Errorf("%w: columnar batch header holds events", ErrMalformed)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if r.err != nil {
		return r.err
	}
	return c.decodeChunk(r, lim)
}

// decodeChunk reads the part of a columnar body after its header (from
// the event count on) into c; lim has its defaults.
func (c *Columns) decodeChunk(r *colReader, lim Limits) error {
	c.Value = c.Value[:0]
	n := r.uvarint("event count")
	if r.err == nil && n > uint64(lim.MaxEvents) {
		return fmt.Errorf("%w: %d events in one batch, limit %d", ErrTooLarge, n, lim.MaxEvents)
	}
	nStr, err := c.decodeStrings(r, lim)
	if err != nil {
		return err
	}
	nSets, err := c.decodeTagSets(r, lim, nStr)
	if err != nil {
		return err
	}
	events := int(n) // at most lim.MaxEvents, which bounds the columns' memory
	sp := colScratch.Get().(*[]uint64)
	defer colScratch.Put(sp)
	c.Metric = readIntColumn(r, c.Metric, events, nStr, "metric column")
	c.TagSet = readIntColumn(r, c.TagSet, events, nSets, "tag set column")
	c.Boot = readIntColumn(r, c.Boot, events, nStr, "boot id column")
	c.Method = r.intColumn(c.Method, events, -1, "method column")
	c.decodeTimes(r, events, sp)
	c.decodeValues(r, events, sp)
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d bytes after the last column", len(r.b))
	}
	if r.err != nil {
		c.Value = c.Value[:0]
		return r.err
	}
	if !c.fitsBody(lim.MaxBodyBytes) {
		c.Value = c.Value[:0]
		return fmt.Errorf("%w: columnar batch stands for a body of up to %d bytes, limit %d", ErrTooLarge, c.protoSizeBound(), lim.MaxBodyBytes)
	}
	return nil
}

// decodeStrings reads the string table, each string bounded by
// lim.MaxStringBytes, and returns its length.
func (c *Columns) decodeStrings(r *colReader, lim Limits) (int, error) {
	nStr := r.count("string count")
	c.Strings = c.Strings[:0]
	for i := range nStr {
		l := r.uvarint("string length")
		if r.err == nil && l > uint64(lim.MaxStringBytes) {
			return 0, fmt.Errorf("%w: string %d of the batch is %d bytes, limit %d", ErrTooLarge, i, l, lim.MaxStringBytes)
		}
		c.Strings = append(c.Strings, r.bytes(int(l), "string"))
		if r.err != nil {
			return 0, r.err
		}
	}
	return nStr, r.err
}

// decodeTagSets reads the tag sets, each of at most lim.MaxTags tags whose
// keys and values index the nStr strings, and returns their number.
func (c *Columns) decodeTagSets(r *colReader, lim Limits, nStr int) (int, error) {
	nSets := r.count("tag set count")
	c.SetStart, c.Tags = append(c.SetStart[:0], 0), c.Tags[:0]
	for range nSets {
		k := r.uvarint("tag count")
		if r.err == nil && k > uint64(lim.MaxTags) {
			return 0, fmt.Errorf("%w: a tag set of %d tags, limit %d", ErrTooLarge, k, lim.MaxTags)
		}
		for range k {
			key, val := r.uvarint("tag key"), r.uvarint("tag value")
			if r.err == nil && (key >= uint64(nStr) || val >= uint64(nStr)) {
				r.fail("tag string index out of range (%d strings)", nStr)
			}
			if r.err != nil {
				return 0, r.err
			}
			c.Tags = append(c.Tags, ColumnTag{uint32(key), uint32(val)})
		}
		c.SetStart = append(c.SetStart, int32(len(c.Tags)))
	}
	return nSets, r.err
}

// decodeTimes reads the device time (delta of deltas), mono (delta from
// the device time's), offset and uncertainty (deltas) columns through the
// scratch column *sp.
func (c *Columns) decodeTimes(r *colReader, events int, sp *[]uint64) {
	// Each column is read into *sp, then expanded into a slice sized for
	// it (empty after an error, which every later read keeps).
	sized := func(col []int64) []int64 { return slices.Grow(col[:0], len(*sp))[:len(*sp)] }
	*sp = r.intColumn(*sp, events, -1, "device time column")
	c.Time = sized(c.Time)
	var t, d uint64
	for i, z := range *sp {
		d += unzigzag(z)
		t += d
		c.Time[i] = int64(t)
	}
	*sp = r.intColumn(*sp, events, -1, "mono column")
	c.Mono = sized(c.Mono)
	var m, prevT uint64
	for i, z := range *sp { // both columns hold n numbers unless r.err is set
		t = uint64(c.Time[i])
		m += unzigzag(z) + (t - prevT)
		prevT = t
		c.Mono[i] = int64(m)
	}
	for _, col := range [...]*[]int64{&c.Offset, &c.Uncertainty} {
		*sp = r.intColumn(*sp, events, -1, "offset or uncertainty column")
		*col = sized(*col)
		var v uint64
		for i, z := range *sp {
			v += unzigzag(z)
			(*col)[i] = int64(v)
		}
	}
}

// decodeValues reads the value column: raw float64s, or decimals of a
// scale of at most maxDecimal digits as deltas.
func (c *Columns) decodeValues(r *colReader, events int, sp *[]uint64) {
	switch mode := r.byte1("value mode"); {
	case r.err != nil:
	case mode == valRaw:
		raw := r.bytes(8*events, "value column")
		for i := 0; i+8 <= len(raw); i += 8 {
			c.Value = append(c.Value, math.Float64frombits(binary.LittleEndian.Uint64(raw[i:])))
		}
	case mode == valDecimal:
		k := r.byte1("value scale")
		if r.err == nil && k > maxDecimal {
			r.fail("value scale %d, at most %d", k, maxDecimal)
			return
		}
		*sp = r.intColumn(*sp, events, -1, "value column")
		c.Value = slices.Grow(c.Value[:0], len(*sp))[:len(*sp)]
		var v uint64
		scale := pow10[k]
		for i, z := range *sp {
			v += unzigzag(z)
			c.Value[i] = float64(int64(v)) / scale
		}
	default:
		r.fail("unknown value mode %d", mode)
	}
}

// eventFixedBound bounds what an event takes in a protobuf body besides
// its strings and tags: its tag and length, 9 fields of at most 11 bytes,
// and the two strings' lengths.
const eventFixedBound = 1 + 3 + 9*11 + 2*2

// setSize bounds the protobuf size of tag set s: per tag, its field tag
// and length, the key's and value's tags and lengths, and the strings.
func (c *Columns) setSize(s int) int {
	n := 0
	for _, t := range c.Tags[c.SetStart[s]:c.SetStart[s+1]] {
		n += 12 + len(c.Strings[t.Key]) + len(c.Strings[t.Value])
	}
	return n
}

// fitsBody says whether the batch, written as protobuf, fits limit. A
// cruder bound than protoSizeBound's, from the longest string and tag set,
// costs a pass over the tables rather than the events and settles any
// batch well within the limit; protoSizeBound settles the rest.
func (c *Columns) fitsBody(limit int) bool {
	longest, set := 0, 0
	for _, s := range c.Strings {
		longest = max(longest, len(s))
	}
	for i := range len(c.SetStart) - 1 {
		set = max(set, c.setSize(i))
	}
	if per := eventFixedBound + 2*longest + set; per <= (limit-len(c.Header))/max(len(c.Value), 1) {
		return true
	}
	return c.protoSizeBound() <= limit
}

// protoSizeBound bounds the size of the batch's protobuf body from above,
// event by event.
func (c *Columns) protoSizeBound() int {
	size := len(c.Header)
	var sets [8]int // sizes of the first sets, the common case
	for i := range c.Value {
		ts := int(c.TagSet[i])
		sn := 0
		if ts < len(sets) {
			if sets[ts] == 0 {
				sets[ts] = c.setSize(ts) + 1
			}
			sn = sets[ts] - 1
		} else {
			sn = c.setSize(ts)
		}
		size += eventFixedBound + len(c.Strings[c.Metric[i]]) + len(c.Strings[c.Boot[i]]) + sn
	}
	return size
}

// AppendProto appends the batch as a protobuf Batch body: the header, then
// each event as field 4, with proto3's zero values left out.
func (c *Columns) AppendProto(dst []byte) []byte {
	dst = append(dst, c.Header...)
	var ev []byte
	for i := range c.Value {
		ev = c.AppendEventProto(ev[:0], i)
		dst = AppendEvent(dst, ev)
	}
	return dst
}

// AppendEventProto appends event i as a protobuf Event, with proto3's zero
// values left out.
func (c *Columns) AppendEventProto(ev []byte, i int) []byte {
	if s := c.Strings[c.Metric[i]]; len(s) > 0 {
		ev = protowire.AppendTag(ev, FieldEventMetric, protowire.BytesType)
		ev = protowire.AppendBytes(ev, s)
	}
	if bits := math.Float64bits(c.Value[i]); bits != 0 {
		ev = protowire.AppendTag(ev, FieldEventValue, protowire.Fixed64Type)
		ev = protowire.AppendFixed64(ev, bits)
	}
	ts := c.TagSet[i]
	for _, t := range c.Tags[c.SetStart[ts]:c.SetStart[ts+1]] {
		k, v := c.Strings[t.Key], c.Strings[t.Value]
		size := 0
		if len(k) > 0 {
			size += 1 + protowire.SizeBytes(len(k))
		}
		if len(v) > 0 {
			size += 1 + protowire.SizeBytes(len(v))
		}
		ev = protowire.AppendTag(ev, FieldEventTags, protowire.BytesType)
		ev = protowire.AppendVarint(ev, uint64(size))
		if len(k) > 0 {
			ev = protowire.AppendTag(ev, FieldTagKey, protowire.BytesType)
			ev = protowire.AppendBytes(ev, k)
		}
		if len(v) > 0 {
			ev = protowire.AppendTag(ev, FieldTagValue, protowire.BytesType)
			ev = protowire.AppendBytes(ev, v)
		}
	}
	ev = appendVarintField(ev, FieldEventDeviceTime, uint64(c.Time[i]))
	ev = appendVarintField(ev, FieldEventMono, uint64(c.Mono[i]))
	if s := c.Strings[c.Boot[i]]; len(s) > 0 {
		ev = protowire.AppendTag(ev, FieldEventBootID, protowire.BytesType)
		ev = protowire.AppendBytes(ev, s)
	}
	ev = appendVarintField(ev, FieldEventOffset, uint64(c.Offset[i]))
	ev = appendVarintField(ev, FieldEventUncertainty, uint64(c.Uncertainty[i]))
	ev = appendVarintField(ev, FieldEventMethod, c.Method[i])
	return ev
}

// appendVarintField appends a varint field unless it is zero.
func appendVarintField(dst []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.VarintType)
	return protowire.AppendVarint(dst, v)
}
