package buffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// ErrCorrupt classifies damaged data found in the store. Errors wrapping it
// name the directory, the stream and what the operator can do.
var ErrCorrupt = errors.New("buffer: corrupt data")

const blockVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeBlock lays records out as
//
//	version u8 | firstSeq uvarint | count uvarint | (len uvarint | bytes)* | crc32c u32le
func encodeBlock(firstSeq uint64, recs [][]byte, size int) []byte {
	out := make([]byte, 0, size+len(recs)*3+24)
	out = append(out, blockVersion)
	out = binary.AppendUvarint(out, firstSeq)
	out = binary.AppendUvarint(out, uint64(len(recs)))
	for _, r := range recs {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...)
	}
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// blockReader iterates the records of an encoded block without copying.
type blockReader struct {
	firstSeq uint64
	count    uint64
	rest     []byte
	i        uint64
}

// openBlock checks a block's checksum and header; lastSeq comes from its key.
func openBlock(v []byte, lastSeq uint64) (blockReader, error) {
	if len(v) < 7 {
		return blockReader{}, fmt.Errorf("%w: block of %d bytes is too short", ErrCorrupt, len(v))
	}
	body, sum := v[:len(v)-4], binary.LittleEndian.Uint32(v[len(v)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return blockReader{}, fmt.Errorf("%w: block ending at seq %d fails its checksum", ErrCorrupt, lastSeq)
	}
	if body[0] != blockVersion {
		return blockReader{}, fmt.Errorf("%w: block version %d", ErrCorrupt, body[0])
	}
	body = body[1:]
	first, n := binary.Uvarint(body)
	if n <= 0 {
		return blockReader{}, fmt.Errorf("%w: block header", ErrCorrupt)
	}
	body = body[n:]
	count, n := binary.Uvarint(body)
	if n <= 0 || count == 0 || count > uint64(len(body)) || first+count-1 != lastSeq {
		return blockReader{}, fmt.Errorf("%w: block header says %d records from %d, key says last %d", ErrCorrupt, count, first, lastSeq)
	}
	return blockReader{firstSeq: first, count: count, rest: body[n:]}, nil
}

// next returns the next record and its sequence number; ok is false at the end.
func (b *blockReader) next() (seq uint64, rec []byte, ok bool, err error) {
	if b.i == b.count {
		return 0, nil, false, nil
	}
	l, n := binary.Uvarint(b.rest)
	if n <= 0 || l > uint64(len(b.rest)-n) {
		return 0, nil, false, fmt.Errorf("%w: record %d of block at seq %d is truncated", ErrCorrupt, b.i, b.firstSeq)
	}
	rec = b.rest[n : n+int(l)]
	b.rest = b.rest[n+int(l):]
	seq = b.firstSeq + b.i
	b.i++
	return seq, rec, true, nil
}
