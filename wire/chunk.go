package wire

import (
	"encoding/binary"
	"fmt"

	"edgeflow/wire/wirepb"
)

// A column chunk is the part of a columnar batch body after its header:
// the event count, the string and tag-set tables and the columns. The
// agent's buffer can store blocks of events as chunks, and an uplink
// sending the columnar codec frames a stored chunk behind a header
// (AppendColumnBatch) without decoding or encoding its events again.

// AppendColumnChunk appends the column chunk of events, each an encoded
// Event, to dst. ok is false when some event has no exact columnar form;
// dst is then returned as it was given.
func AppendColumnChunk(dst []byte, events [][]byte) (out []byte, ok bool) {
	c := colEncoders.Get().(*colEncoder)
	defer colEncoders.Put(c)
	c.reset()
	for _, ev := range events {
		if !c.event(ev) {
			return dst, false
		}
	}
	return c.appendChunk(dst), true
}

// AppendColumnBatch appends to dst the frame of a columnar batch: header's
// fields (its Events must be empty) followed by chunk, the events' column
// chunk. It is what FrameWith(MsgBatch, CodecColumns, body) makes of the
// same batch, without that encoder's work per event.
func AppendColumnBatch(dst []byte, header *wirepb.Batch, chunk []byte) ([]byte, error) {
	if len(header.GetEvents()) > 0 {
		return dst, fmt.Errorf("wire: a columnar batch's header holds %d events", len(header.GetEvents()))
	}
	hdr, err := AppendBatchHeader(nil, header)
	if err != nil {
		return dst, err
	}
	dst = append(dst, frameMagic, SchemaVersion, byte(CodecColumns), byte(MsgBatch), colsVersion)
	dst = binary.AppendUvarint(dst, uint64(len(hdr)))
	dst = append(dst, hdr...)
	return append(dst, chunk...), nil
}

// DecodeChunk reads a column chunk into c, with an empty Header, bounding
// it as Decode bounds a body.
func (c *Columns) DecodeChunk(chunk []byte, lim Limits) error {
	c.Header = nil
	return c.decodeChunk(&colReader{b: chunk}, lim.withDefaults())
}

// ChunkMethods reports which time methods a column chunk's events carry:
// bit m of the mask is set if some event's method is m (methods from 63 on
// all set bit 63). It reads the chunk's method column alone, so a sender
// can tell whether any event needs repair (TIME_METHOD_UNTRUSTED, bit 0)
// without decoding the events.
func ChunkMethods(chunk []byte) (mask uint64, err error) {
	r := &colReader{b: chunk}
	n := r.uvarint("event count") // a chunk can hold more events than bytes
	for range r.count("string count") {
		r.bytes(r.count("string length"), "string")
	}
	for range r.count("tag set count") {
		for range r.count("tag count") {
			r.uvarint("tag key")
			r.uvarint("tag value")
		}
	}
	for _, what := range [...]string{"metric column", "tag set column", "boot id column"} {
		r.skipIntColumn(n, what)
	}
	set := func(v uint64) { mask |= 1 << min(v, 63) }
	switch mode := r.byte1("method column"); {
	case r.err != nil:
	case mode == colPlain:
		for i := uint64(0); i < n && r.err == nil; i++ {
			set(r.uvarint("method column"))
		}
	case mode == colRuns:
		for range r.count("method column runs") {
			set(r.uvarint("method column"))
			r.uvarint("method column run length")
		}
	default:
		r.fail("method column has unknown mode %d", mode)
	}
	if r.err != nil {
		return 0, r.err
	}
	return mask, nil
}

// skipIntColumn steps over an integer column of n numbers without
// checking them.
func (r *colReader) skipIntColumn(n uint64, what string) {
	switch mode := r.byte1(what); {
	case r.err != nil:
	case mode == colPlain:
		for i := uint64(0); i < n && r.err == nil; i++ {
			r.uvarint(what)
		}
	case mode == colRuns:
		for range 2 * r.countOf(what, " runs") {
			r.uvarint(what)
		}
	default:
		r.fail("%s has unknown mode %d", what, mode)
	}
}
