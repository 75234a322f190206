package buffer

import "encoding/binary"

const (
	prefixName  = 'n'
	prefixMeta  = 'm'
	prefixBlock = 'b'

	blockKeyLen = 1 + 4 + 8 + 8 + 4
)

func nameKey(name string) []byte { return append([]byte{prefixName}, name...) }

func metaKey(num uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{prefixMeta}, num)
}

// streamBlockPrefix is 'b' + num: every block key of one stream starts with it.
func streamBlockPrefix(num uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{prefixBlock}, num)
}

// blockKey orders a stream's blocks by their last sequence number, so Seek to
// blockSeekKey(num, seq) lands on the block holding seq (or the next one).
// The append time serves max age and the block's plain (uncompressed)
// length exact byte accounting, both from a key-only scan.
func blockKey(num uint32, lastSeq uint64, appendMs int64, plainLen int) []byte {
	k := make([]byte, 0, blockKeyLen)
	k = append(k, prefixBlock)
	k = binary.BigEndian.AppendUint32(k, num)
	k = binary.BigEndian.AppendUint64(k, lastSeq)
	k = binary.BigEndian.AppendUint64(k, uint64(appendMs))
	return binary.BigEndian.AppendUint32(k, uint32(plainLen))
}

func blockSeekKey(num uint32, seq uint64) []byte {
	k := streamBlockPrefix(num)
	return binary.BigEndian.AppendUint64(k, seq)
}

// blockInfo is what a block key says about its block.
type blockInfo struct {
	lastSeq  uint64
	appendMs int64
	size     int64
}

// parseBlockKey decodes a block key; ok is false for a key of another shape.
func parseBlockKey(k []byte) (blockInfo, bool) {
	if len(k) != blockKeyLen || k[0] != prefixBlock {
		return blockInfo{}, false
	}
	return blockInfo{
		lastSeq:  binary.BigEndian.Uint64(k[5:13]),
		appendMs: int64(binary.BigEndian.Uint64(k[13:21])),
		size:     int64(binary.BigEndian.Uint32(k[21:25])),
	}, true
}

// reclaimKey is the marker a reclaim pass writes under a stream's block
// prefix, so that Badger's DropPrefix, which skips prefixes without a live
// key, compacts the stream's deleted blocks away. It is shorter than a block
// key, so no block reader takes it for one; a crash between writing it and
// the drop leaves it behind, and loading the stream deletes it.
func reclaimKey(num uint32) []byte {
	return append(streamBlockPrefix(num), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
}
