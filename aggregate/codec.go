package aggregate

import (
	"encoding/binary"
	"fmt"
	"math"
)

// encoder appends a deterministic binary encoding (varints, little-endian
// float bits, length-prefixed strings).
type encoder struct{ b []byte }

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) f64(v float64)    { e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v)) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }

// tags writes a tag list: its length, then each key and value.
func (e *encoder) tags(ts []Tag) {
	e.uvarint(uint64(len(ts)))
	for _, t := range ts {
		e.str(t.Key)
		e.str(t.Value)
	}
}
func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// decoder reads what encoder wrote; the first error sticks and every later
// read returns zero values, so callers check err once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or bad %s", ErrCorruptSnapshot, what)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) f64() float64 {
	if len(d.b) < 8 {
		d.fail("float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("length")
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) str() string { return string(d.bytes()) }

// tags reads what encoder.tags wrote; none is nil.
func (d *decoder) tags() []Tag {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	ts := make([]Tag, n)
	for i := range ts {
		ts[i] = Tag{Key: d.str(), Value: d.str()}
	}
	return ts
}

func (d *decoder) bool() bool {
	if len(d.b) < 1 {
		d.fail("bool")
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v == 1
}

// count reads a collection length and bounds it by the bytes left, each
// element taking at least min bytes, so corrupt input cannot make a huge
// allocation.
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/max(min, 1)) {
		d.fail("count")
		return 0
	}
	return int(n)
}
