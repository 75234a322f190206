package hub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The fenced partition checkpoint (natslog.PartitionCheckpoints' data) and
// the KindOwn log entry's payload.
//
// A partition checkpoint is "EFPCK", a version byte, the partition's
// stream position (the last sequence of it whose message the state
// includes) and length-prefixed exports of the partition's devices: the
// event-time engine's (empty without one), the registry's, the clock
// estimator's (empty when the estimator cannot export), from version 2 on
// the attribute table's (attrs.Table.ExportDevices) and from version 3 on
// the partition's history holders (encodeHolders). A record of an older
// version is still read without the later sections and is written back
// in its own version into a KindOwn entry, so a replay decides as the
// live run did.

const (
	partCkptMagic     = "EFPCK"
	partCkptVersionV1 = 1 // engine, registry, clock
	partCkptVersionV2 = 2 // + attribute versions
	partCkptVersion   = 3 // + history holders
)

// Bounds of the holders section read from a checkpoint: hub ids are 1..64
// bytes (lease.Options.HubID).
const (
	maxHolders     = 1024
	maxHolderIDLen = 64
)

// partCkpt is one decoded partition checkpoint.
type partCkpt struct {
	version            byte // 0 when built here (encode picks it)
	pos                uint64
	engine, reg, clock []byte
	// hasAttrs: the record carries the attribute section (version 2 on),
	// in attrs (an empty table's export when the devices have no versions).
	hasAttrs bool
	attrs    []byte
	// holders (version 3) are the hubs whose local logs hold events of the
	// partition up to pos, each with the time of its last checkpoint of
	// it (ns): the hubs GET /v1/events asks for the partition's history.
	holders map[string]int64
}

// errBadPartCkpt is wrapped by every decode failure of a checkpoint or an
// ownership record.
var errBadPartCkpt = errors.New("bad partition checkpoint")

func (c *partCkpt) encode() []byte {
	v := c.version
	switch {
	case v != 0: // decoded: written back as it was
	case c.hasAttrs:
		v = partCkptVersion
	default:
		v = partCkptVersionV1 // no attribute table (tests): no later section
	}
	b := make([]byte, 0, len(partCkptMagic)+1+6*binary.MaxVarintLen64+len(c.engine)+len(c.reg)+len(c.clock)+len(c.attrs))
	b = append(b, partCkptMagic...)
	b = append(b, v)
	sections := [][]byte{c.engine, c.reg, c.clock}
	if v >= partCkptVersionV2 {
		sections = append(sections, c.attrs)
	}
	if v >= partCkptVersion {
		sections = append(sections, encodeHolders(c.holders))
	}
	b = binary.AppendUvarint(b, c.pos)
	for _, x := range sections {
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	}
	return b
}

// encodeHolders is the holders section: their count, then each hub's id
// (length-prefixed) and time, sorted by id so equal sets encode alike.
func encodeHolders(h map[string]int64) []byte {
	b := binary.AppendUvarint(nil, uint64(len(h)))
	for _, id := range slices.Sorted(maps.Keys(h)) {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendVarint(b, h[id])
	}
	return b
}

// decodeHolders reads a holders section, bounding the count and each id.
func decodeHolders(b []byte) (map[string]int64, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxHolders {
		return nil, fmt.Errorf("%w: holders: bad count", errBadPartCkpt)
	}
	b = b[k:]
	h := make(map[string]int64, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l == 0 || l > maxHolderIDLen || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: holders: bad hub id length", errBadPartCkpt)
		}
		id := string(b[k : k+int(l)])
		b = b[k+int(l):]
		ns, k := binary.Varint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: holders: truncated time of %q", errBadPartCkpt, id)
		}
		h[id], b = ns, b[k:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: holders: %d trailing bytes", errBadPartCkpt, len(b))
	}
	return h, nil
}

// decodePartCkpt reads a checkpoint, bounding every length by the bytes
// left; the exports alias b.
func decodePartCkpt(b []byte) (*partCkpt, error) {
	if len(b) < len(partCkptMagic)+1 || string(b[:len(partCkptMagic)]) != partCkptMagic {
		return nil, fmt.Errorf("%w: bad magic", errBadPartCkpt)
	}
	v := b[len(partCkptMagic)]
	if v < partCkptVersionV1 || v > partCkptVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d to %d", errBadPartCkpt, v, partCkptVersionV1, partCkptVersion)
	}
	b = b[len(partCkptMagic)+1:]
	c := &partCkpt{version: v, hasAttrs: v >= partCkptVersionV2}
	var holders []byte
	sections := []*[]byte{&c.engine, &c.reg, &c.clock}
	if c.hasAttrs {
		sections = append(sections, &c.attrs)
	}
	if v >= partCkptVersion {
		sections = append(sections, &holders)
	}
	pos, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: truncated position", errBadPartCkpt)
	}
	c.pos, b = pos, b[n:]
	for i, dst := range sections {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: truncated export %d", errBadPartCkpt, i)
		}
		*dst, b = b[n:n+int(l)], b[n+int(l):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadPartCkpt, len(b))
	}
	if v >= partCkptVersion {
		h, err := decodeHolders(holders)
		if err != nil {
			return nil, err
		}
		c.holders = h
	}
	return c, nil
}

// Ownership records (KindOwn payloads): an operation, the partition and,
// for an import, the checkpoint imported.
const (
	ownDrop   byte = 1 // forget the partition's devices
	ownImport byte = 2 // forget them, then take the checkpoint's
)

// ownRecord is one decoded KindOwn payload.
type ownRecord struct {
	op   byte
	part int
	ckpt *partCkpt // ownImport only
}

func (r *ownRecord) encode() []byte {
	b := []byte{r.op}
	b = binary.AppendUvarint(b, uint64(r.part))
	if r.op == ownImport {
		b = append(b, r.ckpt.encode()...)
	}
	return b
}

// decodeOwnRecord reads a KindOwn payload of a stream of n partitions.
func decodeOwnRecord(b []byte, n int) (*ownRecord, error) {
	if len(b) < 2 || (b[0] != ownDrop && b[0] != ownImport) {
		return nil, fmt.Errorf("%w: ownership record: bad operation", errBadPartCkpt)
	}
	p, k := binary.Uvarint(b[1:])
	if k <= 0 || p >= uint64(n) {
		return nil, fmt.Errorf("%w: ownership record: partition out of range 0..%d", errBadPartCkpt, n-1)
	}
	r := &ownRecord{op: b[0], part: int(p)}
	rest := b[1+k:]
	if r.op == ownDrop {
		if len(rest) != 0 {
			return nil, fmt.Errorf("%w: ownership record: trailing bytes", errBadPartCkpt)
		}
		return r, nil
	}
	c, err := decodePartCkpt(rest)
	if err != nil {
		return nil, err
	}
	r.ckpt = c
	return r, nil
}
