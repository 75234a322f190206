package hub

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The fenced partition checkpoint (natslog.PartitionCheckpoints' data) and
// the KindOwn log entry's payload.
//
// A partition checkpoint is "EFPCK", a version byte, the partition's
// stream position (the last sequence of it whose message the state
// includes) and length-prefixed exports of the partition's devices: the
// event-time engine's (empty without one), the registry's, the clock
// estimator's (empty when the estimator cannot export) and, from version
// 2 on, the attribute table's (attrs.Table.ExportDevices). Version 1 (a
// build before the attribute section) is still read: its record has no
// attribute versions (hasAttrs false) and is written back as version 1
// into a KindOwn entry, so a replay decides as the live run did.

const (
	partCkptMagic     = "EFPCK"
	partCkptVersionV1 = 1
	partCkptVersion   = 2
)

// partCkpt is one decoded partition checkpoint.
type partCkpt struct {
	pos                uint64
	engine, reg, clock []byte
	// hasAttrs: the record carries the attribute section (version 2), in
	// attrs (an empty table's export when the devices have no versions).
	hasAttrs bool
	attrs    []byte
}

// errBadPartCkpt is wrapped by every decode failure of a checkpoint or an
// ownership record.
var errBadPartCkpt = errors.New("bad partition checkpoint")

func (c *partCkpt) encode() []byte {
	b := make([]byte, 0, len(partCkptMagic)+1+5*binary.MaxVarintLen64+len(c.engine)+len(c.reg)+len(c.clock)+len(c.attrs))
	b = append(b, partCkptMagic...)
	sections := [][]byte{c.engine, c.reg, c.clock}
	if c.hasAttrs {
		b = append(b, partCkptVersion)
		sections = append(sections, c.attrs)
	} else {
		b = append(b, partCkptVersionV1)
	}
	b = binary.AppendUvarint(b, c.pos)
	for _, x := range sections {
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	}
	return b
}

// decodePartCkpt reads a checkpoint, bounding every length by the bytes
// left; the exports alias b.
func decodePartCkpt(b []byte) (*partCkpt, error) {
	if len(b) < len(partCkptMagic)+1 || string(b[:len(partCkptMagic)]) != partCkptMagic {
		return nil, fmt.Errorf("%w: bad magic", errBadPartCkpt)
	}
	v := b[len(partCkptMagic)]
	if v != partCkptVersionV1 && v != partCkptVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d and %d", errBadPartCkpt, v, partCkptVersionV1, partCkptVersion)
	}
	b = b[len(partCkptMagic)+1:]
	c := &partCkpt{hasAttrs: v == partCkptVersion}
	sections := []*[]byte{&c.engine, &c.reg, &c.clock}
	if c.hasAttrs {
		sections = append(sections, &c.attrs)
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
