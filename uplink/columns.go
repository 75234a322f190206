package uplink

import (
	"sync"
	"time"

	"edgeflow/buffer"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

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
		events := int(b.Last - b.First + 1)
		if len(cuts) == n || events > maxEvents || b.Plain > maxBytes ||
			(2*events < maxEvents && b.Last+1 < readable) {
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
