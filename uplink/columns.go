package uplink

import (
	"sync"
	"time"

	"edgeflow/buffer"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// BufferBlocks is the buffer block form for an uplink whose Options say
// compression ("" is the default, columns): column blocks under the
// columnar codec, since the uplink sends them as stored, and s2 under any
// other, which would decode column blocks on every read. The edge agent's
// buffer-compression "auto" and the fleet simulator's devices use it.
func BufferBlocks(compression string) buffer.BlockCompression {
	if compression == "" || compression == wire.CodecColumns.String() {
		return buffer.CompressColumns
	}
	return buffer.CompressS2
}

// wholeBatch says whether a column block of events records is large
// enough to go as a batch of its own (half of MaxBatchEvents or more)
// rather than be joined with its neighbours.
func (u *Uplink) wholeBatch(events uint64) bool { return 2*events >= uint64(u.opts.MaxBatchEvents) }

// columnStream is a Stream that can hand out blocks it stores as column
// chunks (buffer.Stream under buffer.CompressColumns). An uplink sending
// the columnar codec frames such a block as a batch as it is: the events
// were encoded once, when they were appended, and a drain after an outage
// neither decodes nor encodes them.
type columnStream interface {
	ScanColumns(seq uint64, fn func(b buffer.ColumnBlock) bool) (int, error)
}

// blockStream is a Stream that tells which block each record is stored in
// and whether it is a column chunk (buffer.Stream), so readBatches can keep
// batches on the boundaries of such blocks.
type blockStream interface {
	ScanBlocks(seq uint64, maxEvents, maxBytes int, fn func(seq uint64, rec []byte, block buffer.Range, columns bool) bool) (int, error)
}

// chunkScratch holds the buffers a column pass copies its blocks' chunks
// into until it has read the header; pooled, like assemblies, so thousands
// of mostly idle uplinks (the fleet simulator) hold a few.
var chunkScratch = sync.Pool{New: func() any { return new([]byte) }}

// columnCut is one block of a column pass: its records and where its chunk
// sits in the pass's scratch buffer.
type columnCut struct {
	first, last uint64
	start, end  int
}

// readColumnBatches is readBatches for blocks stored as column chunks:
// each block from u.next on goes as one batch, up to n, while it fits a
// batch (MaxBatchEvents, MaxBatchBytes), is not small while more records
// wait behind it (small blocks, from a device appending a few events at a
// time, go through readBatches, which joins them), and, with a Retime
// hook, holds no event stored untrusted (which the hook may repair). It
// returns no batch when the first block does not qualify; readBatches
// then reads records as for any other block.
func (u *Uplink) readColumnBatches(n int) ([]*flight, error) {
	cs, ok := u.st.(columnStream)
	if !ok || u.codec != wire.CodecColumns {
		return nil, nil
	}
	maxEvents, maxBytes := u.opts.MaxBatchEvents, u.opts.MaxBatchBytes
	readable := u.st.Stats().Readable
	cuts := u.cuts[:0]
	scratch := chunkScratch.Get().(*[]byte)
	defer chunkScratch.Put(scratch)
	chunks := (*scratch)[:0]
	_, err := cs.ScanColumns(u.next, func(b buffer.ColumnBlock) bool {
		events := b.Last - b.First + 1
		if len(cuts) == n || events > uint64(maxEvents) || b.Plain > maxBytes ||
			(!u.wholeBatch(events) && b.Last+1 < readable) {
			return false
		}
		if u.opts.Retime != nil {
			if m, err := wire.ChunkMethods(b.Chunk); err != nil || m&(1<<uint(wirepb.TimeMethod_TIME_METHOD_UNTRUSTED)) != 0 {
				return false
			}
		}
		start := len(chunks)
		chunks = append(chunks, b.Chunk...)
		cuts = append(cuts, columnCut{first: b.First, last: b.Last, start: start, end: len(chunks)})
		return true
	})
	u.cuts, *scratch = cuts, chunks
	if err != nil || len(cuts) == 0 {
		return nil, err
	}
	u.lingerSince, u.lingered = time.Time{}, false
	fs, err := u.frameBatches(len(cuts), func(i int) (uint64, uint64) { return cuts[i].first, cuts[i].last },
		func(i int, hdr *wirepb.Batch) ([]byte, error) {
			c := cuts[i]
			return wire.AppendColumnBatch(make([]byte, 0, 256+c.end-c.start), hdr, chunks[c.start:c.end])
		})
	u.m.BatchesAsStored.Add(float64(len(fs)))
	return fs, err
}
