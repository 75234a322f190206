package buffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/s2"
)

// ErrCorrupt classifies damaged data found in the store. Errors wrapping it
// name the directory, the stream and what the operator can do.
var ErrCorrupt = errors.New("buffer: corrupt data")

// Block versions. Readers accept both; writers pick per block.
const (
	// blockPlain lays a block out as
	//
	//	1 | firstSeq uvarint | count uvarint | (len uvarint | bytes)* | crc32c u32le
	blockPlain = 1
	// blockS2 is the same body after the version byte, s2-compressed:
	//
	//	2 | s2(firstSeq uvarint | count uvarint | (len uvarint | bytes)*) | crc32c u32le
	//
	// Written when compression saves at least an eighth. Fewer bytes mean
	// more events per memtable, less compaction and less for the page cache
	// and the SD card; events of one device compress well (same metric
	// names and tags). A binary older than this format reads such a block
	// as corrupt and drops it as a gap, so do not downgrade an agent whose
	// buffer holds compressed blocks (or set BlockCompression none first
	// and let the buffer drain).
	blockS2 = 2
)

// maxBlockBody bounds a decompressed block body: the largest block the
// writer makes (maxBlockBytes of records plus varint headers) with room to
// spare, so a damaged length cannot make a reader allocate much.
const maxBlockBody = 2*maxBlockBytes + 64

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeBlock encodes records as one block, compressed if compress is set
// and it pays, and returns it with the length of its plain encoding, which
// is what stream bounds count. scratch is reused for the plain body of a
// compressed block; the result never shares memory with it (Badger keeps
// the value until the write batch is flushed).
func encodeBlock(firstSeq uint64, recs [][]byte, size int, compress bool, scratch *[]byte) (v []byte, plainLen int) {
	var body []byte
	if compress {
		body = (*scratch)[:0]
	} else {
		body = make([]byte, 0, size+len(recs)*3+24)
	}
	body = append(body, blockPlain)
	body = binary.AppendUvarint(body, firstSeq)
	body = binary.AppendUvarint(body, uint64(len(recs)))
	for _, r := range recs {
		body = binary.AppendUvarint(body, uint64(len(r)))
		body = append(body, r...)
	}
	if compress {
		*scratch = body
		raw := body[1:]
		m := s2.MaxEncodedLen(len(raw))
		out := make([]byte, 1+m, 1+m+4)
		out[0] = blockS2
		out = out[:1+len(s2.Encode(out[1:], raw))] // Encode writes in place: len(dst) >= m
		if len(out) < len(body)-len(body)/8 {
			return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), len(body) + 4
		}
		body = append([]byte(nil), body...)
	}
	return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli)), len(body) + 4
}

// blockReader iterates the records of an encoded block without copying.
type blockReader struct {
	firstSeq uint64
	count    uint64
	rest     []byte
	i        uint64
}

// openBlock checks a block's checksum and header; lastSeq comes from its
// key. The records it returns point into v for a plain block, unless own is
// set, and into a new buffer for a compressed one: with own they outlive v.
// Without own, a compressed block is decoded into *scratch when it is large
// enough (and *scratch is grown to fit otherwise), so a read of many blocks
// reuses one buffer; the records are then valid until the next use of it.
func openBlock(v []byte, lastSeq uint64, own bool, scratch *[]byte) (blockReader, error) {
	if len(v) < 7 {
		return blockReader{}, fmt.Errorf("%w: block of %d bytes is too short", ErrCorrupt, len(v))
	}
	body, sum := v[:len(v)-4], binary.LittleEndian.Uint32(v[len(v)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return blockReader{}, fmt.Errorf("%w: block ending at seq %d fails its checksum", ErrCorrupt, lastSeq)
	}
	switch body[0] {
	case blockPlain:
		body = body[1:]
		if own {
			body = append([]byte(nil), body...)
		}
	case blockS2:
		n, err := s2.DecodedLen(body[1:])
		if err != nil || n > maxBlockBody {
			return blockReader{}, fmt.Errorf("%w: compressed block ending at seq %d: length %d: %v", ErrCorrupt, lastSeq, n, err)
		}
		var dst []byte
		if !own && scratch != nil {
			if cap(*scratch) < n {
				*scratch = make([]byte, n)
			}
			dst = (*scratch)[:n]
		} else {
			dst = make([]byte, n)
		}
		if body, err = s2.Decode(dst, body[1:]); err != nil {
			return blockReader{}, fmt.Errorf("%w: compressed block ending at seq %d: %v", ErrCorrupt, lastSeq, err)
		}
	default:
		return blockReader{}, fmt.Errorf("%w: block version %d (written by a newer agent?)", ErrCorrupt, body[0])
	}
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
