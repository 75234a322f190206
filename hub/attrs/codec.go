package attrs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// The first byte of an encoded version (a log entry's payload) and of a
// snapshot.
// snapshotCodecV1 is the snapshot of a build before devices had flags:
// still read, never written.
const (
	versionCodec    = 1
	snapshotCodecV1 = 1
	snapshotCodec   = 2
)

// ErrCorrupt marks an encoded version or snapshot that does not decode.
var ErrCorrupt = errors.New("attrs: corrupt encoding")

// EncodeVersion encodes v (keys sorted, so equal versions encode equally)
// as a log entry payload; Written is the entry's own server time and is
// not encoded.
func EncodeVersion(v Version) []byte {
	b := []byte{versionCodec}
	return appendVersion(b, v, false)
}

func appendVersion(b []byte, v Version, written bool) []byte {
	b = binary.AppendVarint(b, v.From)
	if written {
		b = binary.AppendVarint(b, v.Written)
	}
	b = binary.AppendUvarint(b, uint64(len(v.Attrs)))
	for _, k := range slices.Sorted(maps.Keys(v.Attrs)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v.Attrs[k])))
		b = append(b, v.Attrs[k]...)
	}
	return b
}

// DecodeVersion decodes a log entry payload; sizes are bounded by lim
// (a count or length beyond them is corrupt, never allocated).
func DecodeVersion(b []byte, lim Limits) (Version, error) {
	if len(b) == 0 || b[0] != versionCodec {
		return Version{}, fmt.Errorf("%w: unknown version codec", ErrCorrupt)
	}
	d := decoder{b: b[1:], lim: lim}
	v := d.version(false)
	if d.err == nil && len(d.b) != 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return Version{}, fmt.Errorf("%w: %v", ErrCorrupt, d.err)
	}
	return v, nil
}

type decoder struct {
	b   []byte
	lim Limits
	err error
}

func (d *decoder) uvarint(max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	if v > max {
		d.err = fmt.Errorf("count %d over its bound %d", v, max)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(max int) string {
	n := d.uvarint(uint64(max))
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errors.New("truncated")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) version(written bool) Version {
	v := Version{From: d.varint()}
	if written {
		v.Written = d.varint()
	}
	n := d.uvarint(uint64(d.lim.MaxKeys))
	v.Attrs = make(map[string]string, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.str(d.lim.MaxKeyLen)
		v.Attrs[k] = d.str(d.lim.MaxValueLen)
	}
	return v
}

// Snapshot encodes the whole table (devices sorted) for the hub's
// checkpoint.
func (t *Table) Snapshot() []byte {
	return t.ExportDevices(nil)
}

// ExportDevices encodes the versions of the devices keep selects (nil:
// all), in the snapshot's encoding: a partition checkpoint carries its
// devices' versions this way to the partition's next owner
// (ReplaceDevices).
func (t *Table) ExportDevices(keep func(device string) bool) []byte {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ids := make([]string, 0, len(t.dev))
	for d := range t.dev {
		if keep == nil || keep(d) {
			ids = append(ids, d)
		}
	}
	slices.Sort(ids)
	b := []byte{snapshotCodec}
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, d := range ids {
		vs := t.dev[d]
		b = binary.AppendUvarint(b, uint64(len(d)))
		b = append(b, d...)
		var flags uint64
		if t.held[d] {
			flags |= flagHeld
		}
		b = binary.AppendUvarint(b, flags)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendVersion(b, v, true)
		}
	}
	return b
}

// A device's flags in a snapshot (codec 2).
const flagHeld = 1 // its versions came from another hub: Compact leaves them

// maxDeviceLen bounds a device id read from a snapshot or an export.
const maxDeviceLen = 256

// decodeTable reads a Snapshot or an ExportDevices encoding (codec 1,
// without flags, or 2), bounding every count by the bytes left.
func (t *Table) decodeTable(b []byte) (map[string][]Version, map[string]bool, error) {
	if len(b) == 0 || (b[0] != snapshotCodecV1 && b[0] != snapshotCodec) {
		return nil, nil, fmt.Errorf("%w: unknown snapshot codec", ErrCorrupt)
	}
	flags := b[0] == snapshotCodec
	d := decoder{b: b[1:], lim: t.lim}
	n := d.uvarint(uint64(len(b)))
	dev := make(map[string][]Version, min(n, 1<<16))
	held := map[string]bool{}
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := d.str(maxDeviceLen)
		if flags && d.uvarint(math.MaxUint64)&flagHeld != 0 {
			held[id] = true
		}
		m := d.uvarint(uint64(len(d.b)))
		vs := make([]Version, 0, m)
		for j := uint64(0); j < m && d.err == nil; j++ {
			vs = append(vs, d.version(true))
		}
		if d.err == nil && !slices.IsSortedFunc(vs, func(a, b Version) int { return cmpInt(a.From, b.From) }) {
			d.err = fmt.Errorf("device %s: versions out of order", id)
		}
		if _, dup := dev[id]; dup && d.err == nil {
			d.err = fmt.Errorf("device %s twice", id)
		}
		dev[id] = vs
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, nil, fmt.Errorf("%w: snapshot: %v", ErrCorrupt, d.err)
	}
	return dev, held, nil
}

// Restore replaces the table with a Snapshot's.
func (t *Table) Restore(b []byte) error {
	dev, held, err := t.decodeTable(b)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.dev, t.held = dev, held
	t.mu.Unlock()
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
