package buffer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/klauspost/compress/s2"

	"edgeflow/wire"
)

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
	// blockColumns holds events in the wire's columnar form (a column
	// chunk, wire.AppendColumnChunk):
	//
	//	3 | firstSeq uvarint | count uvarint | chunk | crc32c u32le
	//
	// Written under CompressColumns when every record is an event the
	// columns carry exactly and the chunk saves at least an eighth. An
	// uplink sending the columnar codec frames the chunk as a batch
	// without touching its events (Stream.ScanColumns); other reads decode
	// it to records. Binaries before this format read such a block as
	// corrupt, as with blockS2.
	blockColumns = 3
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
func encodeBlock(firstSeq uint64, recs [][]byte, size int, mode BlockCompression, scratch *[]byte) (v []byte, plainLen int) {
	if mode == CompressColumns && len(recs) >= minColumnRecords {
		plain := plainBlockLen(firstSeq, recs)
		if v, ok := encodeColumnBlock(firstSeq, recs, plain); ok {
			return v, plain
		}
		mode = CompressS2
	}
	compress := mode == CompressS2
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

// minColumnRecords is the fewest records CompressColumns tries to store as
// columns: a chunk's tables cost more than a few events save, so smaller
// blocks (a device appending one event at a time) go straight to s2.
const minColumnRecords = 8

// plainBlockLen is the length of recs' plain block: what stream bounds
// count whichever form the block is stored in.
func plainBlockLen(firstSeq uint64, recs [][]byte) int {
	n := 1 + uvarintLen(firstSeq) + uvarintLen(uint64(len(recs))) + 4
	for _, r := range recs {
		n += uvarintLen(uint64(len(r))) + len(r)
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// encodeColumnBlock encodes recs as a blockColumns block, if they are all
// events with an exact columnar form and it saves an eighth of plain, the
// length of their plain block.
func encodeColumnBlock(firstSeq uint64, recs [][]byte, plain int) ([]byte, bool) {
	v := make([]byte, 0, plain/3+32)
	v = append(v, blockColumns)
	v = binary.AppendUvarint(v, firstSeq)
	v = binary.AppendUvarint(v, uint64(len(recs)))
	v, ok := wire.AppendColumnChunk(v, recs)
	if !ok || len(v)+4 >= plain-plain/8 {
		return nil, false
	}
	return binary.LittleEndian.AppendUint32(v, crc32.Checksum(v, castagnoli)), true
}

// openColumns checks a column block's checksum and returns its chunk, or
// ok false for a block of another kind.
func openColumns(v []byte, lastSeq uint64) (first, count uint64, chunk []byte, ok bool, err error) {
	if len(v) > 0 && v[0] != blockColumns {
		// Another kind (or a damaged version byte, which the reader of
		// that kind finds): no checksum pass over a block not used here.
		return 0, 0, nil, false, nil
	}
	if len(v) < 7 {
		return 0, 0, nil, false, fmt.Errorf("%w: block of %d bytes is too short", ErrCorrupt, len(v))
	}
	body, sum := v[:len(v)-4], binary.LittleEndian.Uint32(v[len(v)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return 0, 0, nil, false, fmt.Errorf("%w: block ending at seq %d fails its checksum", ErrCorrupt, lastSeq)
	}
	first, count, chunk, err = columnHeader(body[1:], lastSeq)
	return first, count, chunk, err == nil, err
}

// columnHeader is blockHeader for a column block, whose count a chunk's
// size does not bound.
func columnHeader(body []byte, lastSeq uint64) (first, count uint64, chunk []byte, err error) {
	first, count, chunk, err = blockHeader(body, lastSeq)
	if err == nil && count > maxBlockRecords {
		err = fmt.Errorf("%w: column block ending at seq %d says %d records, at most %d", ErrCorrupt, lastSeq, count, maxBlockRecords)
	}
	return first, count, chunk, err
}

// blockHeader reads a block body's first sequence number and record count
// and checks them against lastSeq, from the block's key. A column chunk
// can hold more events than bytes; its decoder bounds the count.
func blockHeader(body []byte, lastSeq uint64) (first, count uint64, rest []byte, err error) {
	first, n := binary.Uvarint(body)
	if n <= 0 {
		return 0, 0, nil, fmt.Errorf("%w: block header", ErrCorrupt)
	}
	body = body[n:]
	count, n = binary.Uvarint(body)
	if n <= 0 || count == 0 || count > lastSeq || first+count-1 != lastSeq {
		return 0, 0, nil, fmt.Errorf("%w: block header says %d records from %d, key says last %d", ErrCorrupt, count, first, lastSeq)
	}
	return first, count, body[n:], nil
}

// maxBlockRecords bounds the records of a block: the writer counts each
// record's length plus 4 against MaxBlockBytes, and the record that
// crosses it is the block's last.
const maxBlockRecords = maxBlockBytes/4 + 1

// chunkLimits bound the decoding of a stored column chunk (its count is
// checked against maxBlockRecords first, so a damaged one cannot make the
// decoder allocate much).
var chunkLimits = wire.Limits{MaxEvents: maxBlockRecords, MaxBodyBytes: 1 << 30}

// columnDecoders are reused by reads decoding column blocks.
var columnDecoders = sync.Pool{New: func() any { return new(wire.Columns) }}

// decodeColumns rewrites a column chunk of count events as the records of
// a plain block body ((len uvarint | bytes)*) in dst.
func decodeColumns(dst, chunk []byte, count, lastSeq uint64) ([]byte, error) {
	c := columnDecoders.Get().(*wire.Columns)
	defer columnDecoders.Put(c)
	if err := c.DecodeChunk(chunk, chunkLimits); err != nil {
		return nil, fmt.Errorf("%w: column block ending at seq %d: %v", ErrCorrupt, lastSeq, err)
	}
	if uint64(c.Len()) != count {
		return nil, fmt.Errorf("%w: column block ending at seq %d holds %d events, its header says %d", ErrCorrupt, lastSeq, c.Len(), count)
	}
	var ev []byte
	for i := range c.Len() {
		ev = c.AppendEventProto(ev[:0], i)
		dst = binary.AppendUvarint(dst, uint64(len(ev)))
		dst = append(dst, ev...)
	}
	return dst, nil
}

// blockReader iterates the records of an encoded block without copying.
type blockReader struct {
	firstSeq uint64
	count    uint64
	rest     []byte
	i        uint64
	columns  bool // stored as a column chunk
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
	case blockColumns:
		first, count, chunk, err := columnHeader(body[1:], lastSeq)
		if err != nil {
			return blockReader{}, err
		}
		var dst []byte
		if !own && scratch != nil {
			dst = (*scratch)[:0]
		}
		recs, err := decodeColumns(dst, chunk, count, lastSeq)
		if err != nil {
			return blockReader{}, err
		}
		if !own && scratch != nil {
			*scratch = recs
		}
		return blockReader{firstSeq: first, count: count, rest: recs, columns: true}, nil
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
	first, count, rest, err := blockHeader(body, lastSeq)
	if err != nil {
		return blockReader{}, err
	}
	if count > uint64(len(rest)) { // a record takes a byte at least (its length)
		return blockReader{}, fmt.Errorf("%w: block header says %d records in %d bytes", ErrCorrupt, count, len(rest))
	}
	return blockReader{firstSeq: first, count: count, rest: rest}, nil
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
