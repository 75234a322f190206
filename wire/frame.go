package wire

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"edgeflow/wire/wirepb"
)

// Frame header: magic, schema version, codec, message kind.
const (
	frameMagic    = 0xE7
	SchemaVersion = 1
	headerLen     = 4
)

// Codec says how a frame's body is encoded.
type Codec byte

// Codecs.
const (
	CodecNone Codec = 0
	CodecZstd Codec = 1
	// CodecS2 is klauspost/compress's S2 block format: about a third the
	// CPU of zstd's fastest level for both ends, at frames about half
	// again as large. For links where CPU, not bytes, is scarce.
	CodecS2 Codec = 2
	// CodecColumns writes a batch column by column (columns.go): smaller
	// than zstd makes the protobuf body for a batch of readings, at a
	// fraction of its CPU at both ends. Batches only; a batch with no exact
	// columnar form (an unknown event field, say) is sent with zstd.
	CodecColumns Codec = 3
)

// String names the codec as configuration does.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecZstd:
		return "zstd"
	case CodecS2:
		return "s2"
	case CodecColumns:
		return "columns"
	}
	return fmt.Sprintf("codec(%d)", byte(c))
}

// ParseCodec reads a codec name as configuration spells it: none, zstd,
// s2 or columns.
func ParseCodec(name string) (Codec, error) {
	for _, c := range []Codec{CodecNone, CodecZstd, CodecS2, CodecColumns} {
		if c.String() == name {
			return c, nil
		}
	}
	return 0, fmt.Errorf("wire: unknown compression %q (want none, zstd, s2 or columns)", name)
}

// MsgKind says which message a frame holds, so a payload on the wrong topic
// is rejected before it is parsed as something else.
type MsgKind byte

// Message kinds.
const (
	MsgBatch    MsgKind = 1
	MsgAck      MsgKind = 2
	MsgTimeReq  MsgKind = 3
	MsgTimeResp MsgKind = 4
	MsgStatus   MsgKind = 5
)

func (k MsgKind) String() string {
	switch k {
	case MsgBatch:
		return "batch"
	case MsgAck:
		return "ack"
	case MsgTimeReq:
		return "time request"
	case MsgTimeResp:
		return "time response"
	case MsgStatus:
		return "status"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Limits bound what a decoder accepts. Zero fields take DefaultLimits' values.
type Limits struct {
	// MaxFrameBytes bounds the payload as received (compressed). Default 8 MiB.
	MaxFrameBytes int
	// MaxBodyBytes bounds the body after decompression. Default 32 MiB.
	MaxBodyBytes int
	// MaxEvents bounds events in one batch. Default 100,000.
	MaxEvents int
	// MaxTags bounds tags on one event. Default 64.
	MaxTags int
	// MaxGaps bounds gap ranges in one batch. Default 1,024.
	MaxGaps int
	// MaxStringBytes bounds a metric name, tag key or value, boot id or
	// reason. Default 256.
	MaxStringBytes int
}

// DefaultLimits are the limits used when a Limits field is zero.
var DefaultLimits = Limits{
	MaxFrameBytes:  8 << 20,
	MaxBodyBytes:   32 << 20,
	MaxEvents:      100_000,
	MaxTags:        64,
	MaxGaps:        1024,
	MaxStringBytes: 256,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxFrameBytes > 0 {
		d.MaxFrameBytes = l.MaxFrameBytes
	}
	if l.MaxBodyBytes > 0 {
		d.MaxBodyBytes = l.MaxBodyBytes
	}
	if l.MaxEvents > 0 {
		d.MaxEvents = l.MaxEvents
	}
	if l.MaxTags > 0 {
		d.MaxTags = l.MaxTags
	}
	if l.MaxGaps > 0 {
		d.MaxGaps = l.MaxGaps
	}
	if l.MaxStringBytes > 0 {
		d.MaxStringBytes = l.MaxStringBytes
	}
	return d
}

// compressMin is the body size below which zstd does not pay for itself.
const compressMin = 512

var (
	encOnce sync.Once
	encoder *zstd.Encoder
	decOnce sync.Once
	decoder *zstd.Decoder
)

func zenc() *zstd.Encoder {
	encOnce.Do(func() {
		var err error
		// One encoder state per CPU, made on first use: with a single one,
		// uplinks sharing a process (a fleet simulator, the benchmarks)
		// would compress one batch at a time.
		encoder, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(fmt.Sprintf("wire: zstd encoder: %v", err))
		}
	})
	return encoder
}

func zdec() *zstd.Decoder {
	decOnce.Do(func() {
		var err error
		decoder, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(uint64(DefaultLimits.MaxBodyBytes)), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			panic(fmt.Sprintf("wire: zstd decoder: %v", err))
		}
	})
	return decoder
}

// Frame wraps an encoded protobuf body in a frame, compressing it with zstd
// when it is large enough and compression saves at least an eighth.
func Frame(kind MsgKind, body []byte) []byte { return FrameWith(kind, CodecZstd, body) }

// FrameWith is Frame with the codec chosen: the body is sent uncompressed
// when it is short or codec does not save an eighth of it. CodecColumns
// rewrites a batch's protobuf body column by column; any other message, or
// a batch without an exact columnar form or whose columns do not save an
// eighth, goes as with CodecZstd.
func FrameWith(kind MsgKind, codec Codec, body []byte) []byte {
	if codec == CodecColumns {
		if kind == MsgBatch && len(body) >= compressMin {
			out := make([]byte, headerLen, headerLen+len(body)/3)
			if out, ok := appendColumns(out, body); ok && len(out) < len(body)-len(body)/8 {
				out[0], out[1], out[2], out[3] = frameMagic, SchemaVersion, byte(CodecColumns), byte(kind)
				return out
			}
		}
		codec = CodecZstd
	}
	if len(body) >= compressMin && (codec == CodecZstd || codec == CodecS2) {
		var out []byte
		if codec == CodecZstd {
			out = make([]byte, headerLen, headerLen+binary.MaxVarintLen64+len(body)/2)
			out = binary.AppendUvarint(out, uint64(len(body)))
			out = zenc().EncodeAll(body, out)
		} else {
			out = make([]byte, headerLen+s2.MaxEncodedLen(len(body)))
			out = out[:headerLen+len(s2.Encode(out[headerLen:], body))]
		}
		if len(out) < len(body)-len(body)/8 {
			out[0], out[1], out[2], out[3] = frameMagic, SchemaVersion, byte(codec), byte(kind)
			return out
		}
	}
	out := make([]byte, headerLen, headerLen+len(body))
	out[0], out[1], out[2], out[3] = frameMagic, SchemaVersion, byte(CodecNone), byte(kind)
	return append(out, body...)
}

// Unframe checks a frame's header and returns its decompressed body, the
// protobuf encoding of the message (a columnar batch is rewritten as one).
func Unframe(want MsgKind, payload []byte, lim Limits) ([]byte, error) {
	lim = lim.withDefaults()
	body, columnar, err := unframe(want, payload, lim)
	if err != nil || !columnar {
		return body, err
	}
	c := columnsPool.Get().(*Columns)
	defer columnsPool.Put(c)
	if err := c.Decode(body, lim); err != nil {
		return nil, err
	}
	return c.AppendProto(make([]byte, 0, c.protoSizeBound())), nil
}

// columnsPool holds decoders for Unframe's rewriting of columnar batches.
var columnsPool = sync.Pool{New: func() any { return new(Columns) }}

// UnframeBatch checks a batch frame's header and returns its body: the
// decompressed protobuf body or, with columnar set, the columnar body as
// received, for Columns.Decode. Readers on a hot path use it to skip
// Unframe's rewriting of a columnar batch as protobuf.
func UnframeBatch(payload []byte, lim Limits) (body []byte, columnar bool, err error) {
	return unframe(MsgBatch, payload, lim.withDefaults())
}

// unframe is Unframe without the rewriting; lim has its defaults.
func unframe(want MsgKind, payload []byte, lim Limits) ([]byte, bool, error) {
	if len(payload) > lim.MaxFrameBytes {
		return nil, false, fmt.Errorf("%w: %s payload is %d bytes, limit %d", ErrTooLarge, want, len(payload), lim.MaxFrameBytes)
	}
	if len(payload) < headerLen {
		return nil, false, fmt.Errorf("%w: %d bytes is shorter than the %d-byte header", ErrMalformed, len(payload), headerLen)
	}
	if payload[0] != frameMagic {
		return nil, false, fmt.Errorf("%w: bad magic byte 0x%02x (want 0x%02x)", ErrMalformed, payload[0], frameMagic)
	}
	if payload[1] != SchemaVersion {
		return nil, false, fmt.Errorf("%w: version %d (this build speaks %d)", ErrVersion, payload[1], SchemaVersion)
	}
	if got := MsgKind(payload[3]); got != want {
		return nil, false, fmt.Errorf("%w: frame holds a %s, expected a %s", ErrMalformed, got, want)
	}
	body := payload[headerLen:]
	switch Codec(payload[2]) {
	case CodecNone:
		return body, false, nil
	case CodecColumns:
		if want != MsgBatch {
			return nil, false, fmt.Errorf("%w: a %s in the columnar codec, which only batches use", ErrMalformed, want)
		}
		return body, true, nil
	case CodecZstd:
		n, k := binary.Uvarint(body)
		if k <= 0 {
			return nil, false, fmt.Errorf("%w: bad decompressed-length prefix", ErrMalformed)
		}
		if n > uint64(lim.MaxBodyBytes) {
			return nil, false, fmt.Errorf("%w: declared body of %d bytes, limit %d", ErrTooLarge, n, lim.MaxBodyBytes)
		}
		out, err := zdec().DecodeAll(body[k:], make([]byte, 0, int(n)))
		if err != nil {
			return nil, false, fmt.Errorf("%w: zstd: %v", ErrMalformed, err)
		}
		if uint64(len(out)) != n {
			return nil, false, fmt.Errorf("%w: body decompressed to %d bytes, header said %d", ErrMalformed, len(out), n)
		}
		return out, false, nil
	case CodecS2:
		n, err := s2.DecodedLen(body)
		if err != nil {
			return nil, false, fmt.Errorf("%w: s2: %v", ErrMalformed, err)
		}
		if n > lim.MaxBodyBytes {
			return nil, false, fmt.Errorf("%w: declared body of %d bytes, limit %d", ErrTooLarge, n, lim.MaxBodyBytes)
		}
		out, err := s2.Decode(make([]byte, n), body)
		if err != nil {
			return nil, false, fmt.Errorf("%w: s2: %v", ErrMalformed, err)
		}
		return out, false, nil
	}
	return nil, false, fmt.Errorf("%w: unknown codec %d", ErrMalformed, payload[2])
}

// encode marshals m and frames it.
func encode(kind MsgKind, m proto.Message) ([]byte, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("wire: encode %s: %w", kind, err)
	}
	return Frame(kind, body), nil
}

// unmarshal parses body into m after the caller's pre-scan bounded it.
func unmarshal(kind MsgKind, body []byte, m proto.Message) error {
	if err := proto.Unmarshal(body, m); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, kind, err)
	}
	return nil
}

// scanFields walks the top-level fields of a protobuf message and calls fn
// for each; it fails on malformed encoding without allocating.
func scanFields(b []byte, fn func(num protowire.Number, typ protowire.Type, val []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad field tag: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(m))
		}
		val := b[:m]
		if typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(val)
			if k < 0 {
				return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(k))
			}
			val = v
		}
		if err := fn(num, typ, val); err != nil {
			return err
		}
		b = b[m:]
	}
	return nil
}

// checkString bounds a length-delimited string field.
func checkString(what string, val []byte, lim Limits) error {
	if len(val) > lim.MaxStringBytes {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, what, len(val), lim.MaxStringBytes)
	}
	return nil
}

// ScanEvent bounds one encoded Event (tags, string sizes) without
// allocating. The agent uses it on records read back from its buffer.
func ScanEvent(b []byte, lim Limits) error {
	lim = lim.withDefaults()
	tags := 0
	return scanFields(b, func(num protowire.Number, typ protowire.Type, val []byte) error {
		switch num {
		case FieldEventMetric:
			return checkString("metric name", val, lim)
		case FieldEventBootID:
			return checkString("boot id", val, lim)
		case FieldEventTags:
			if tags++; tags > lim.MaxTags {
				return fmt.Errorf("%w: more than %d tags on one event", ErrTooLarge, lim.MaxTags)
			}
			return scanFields(val, func(_ protowire.Number, _ protowire.Type, kv []byte) error {
				return checkString("tag key or value", kv, lim)
			})
		}
		return nil
	})
}

func scanBatch(b []byte, lim Limits) error {
	events, gaps := 0, 0
	return scanFields(b, func(num protowire.Number, typ protowire.Type, val []byte) error {
		switch num {
		case FieldBatchEvents:
			if events++; events > lim.MaxEvents {
				return fmt.Errorf("%w: more than %d events in one batch", ErrTooLarge, lim.MaxEvents)
			}
			if err := ScanEvent(val, lim); err != nil {
				return fmt.Errorf("event %d: %w", events-1, err)
			}
		case FieldBatchGaps:
			if gaps++; gaps > lim.MaxGaps {
				return fmt.Errorf("%w: more than %d gaps in one batch", ErrTooLarge, lim.MaxGaps)
			}
		case FieldBatchDeviceID:
			return checkString("device id", val, lim)
		}
		return nil
	})
}

// EncodeBatch frames a batch.
func EncodeBatch(b *wirepb.Batch) ([]byte, error) { return encode(MsgBatch, b) }

// AppendRawEvents builds a batch body from a header message (events left
// empty) and events that are already protobuf-encoded, as the agent's buffer
// stores them, so uploading never decodes and re-encodes an event.
func AppendRawEvents(header *wirepb.Batch, events [][]byte) ([]byte, error) {
	size := 0
	for _, e := range events {
		size += len(e) + 8
	}
	body, err := AppendBatchHeader(make([]byte, 0, size+256), header)
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		body = AppendEvent(body, e)
	}
	return body, nil
}

// AppendBatchHeader appends a batch header (a Batch whose Events are empty)
// to dst. A batch body is its header followed by its events (AppendEvent);
// protobuf allows the events to follow the other fields, and every decoder
// here accepts them in any order.
func AppendBatchHeader(dst []byte, header *wirepb.Batch) ([]byte, error) {
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, header)
	if err != nil {
		return dst, fmt.Errorf("wire: encode batch header: %w", err)
	}
	return out, nil
}

// AppendEvent appends one protobuf-encoded Event to dst as a Batch's events
// field, without decoding it.
func AppendEvent(dst, event []byte) []byte {
	dst = protowire.AppendTag(dst, FieldBatchEvents, protowire.BytesType)
	return protowire.AppendBytes(dst, event)
}

// DecodeBatch checks and parses a batch frame. It bounds the number of
// events, tags, gaps and every string before the protobuf parser allocates.
func DecodeBatch(payload []byte, lim Limits) (*wirepb.Batch, error) {
	lim = lim.withDefaults()
	body, err := Unframe(MsgBatch, payload, lim)
	if err != nil {
		return nil, err
	}
	if err := scanBatch(body, lim); err != nil {
		return nil, err
	}
	b := new(wirepb.Batch)
	if err := unmarshal(MsgBatch, body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// EncodeAck frames an ack.
func EncodeAck(a *wirepb.Ack) ([]byte, error) { return encode(MsgAck, a) }

// DecodeAck checks and parses an ack frame.
func DecodeAck(payload []byte, lim Limits) (*wirepb.Ack, error) {
	a := new(wirepb.Ack)
	return a, decodeSmall(MsgAck, payload, lim, a)
}

// RunAckStatus reports whether one ack with status s may answer a run of
// consecutive batches (to an agent whose batches say range_acks): OK and
// DUPLICATE only, since every batch of the run has the status; a
// rejection's reason and a retry's delay belong to one batch.
func RunAckStatus(s wirepb.AckStatus) bool {
	return s == wirepb.AckStatus_ACK_STATUS_OK || s == wirepb.AckStatus_ACK_STATUS_DUPLICATE
}

// EncodeTimeRequest frames a time request.
func EncodeTimeRequest(r *wirepb.TimeRequest) ([]byte, error) { return encode(MsgTimeReq, r) }

// DecodeTimeRequest checks and parses a time request frame.
func DecodeTimeRequest(payload []byte, lim Limits) (*wirepb.TimeRequest, error) {
	r := new(wirepb.TimeRequest)
	return r, decodeSmall(MsgTimeReq, payload, lim, r)
}

// EncodeTimeResponse frames a time response.
func EncodeTimeResponse(r *wirepb.TimeResponse) ([]byte, error) { return encode(MsgTimeResp, r) }

// DecodeTimeResponse checks and parses a time response frame.
func DecodeTimeResponse(payload []byte, lim Limits) (*wirepb.TimeResponse, error) {
	r := new(wirepb.TimeResponse)
	return r, decodeSmall(MsgTimeResp, payload, lim, r)
}

// EncodeStatus frames a status message.
func EncodeStatus(s *wirepb.Status) ([]byte, error) { return encode(MsgStatus, s) }

// DecodeStatus checks and parses a status frame.
func DecodeStatus(payload []byte, lim Limits) (*wirepb.Status, error) {
	s := new(wirepb.Status)
	return s, decodeSmall(MsgStatus, payload, lim, s)
}

// smallMax bounds the body of the fixed-shape messages (acks, time, status):
// they never legitimately approach it.
const smallMax = 4 << 10

// decodeSmall decodes a small message (an ack's refused ranges are its
// only repeated field, at most 32 of them from a hub); the 4 KiB cap on
// its body bounds everything the parser can allocate.
func decodeSmall(kind MsgKind, payload []byte, lim Limits, m proto.Message) error {
	lim = lim.withDefaults()
	if lim.MaxFrameBytes > smallMax {
		lim.MaxFrameBytes = smallMax
	}
	if lim.MaxBodyBytes > smallMax {
		lim.MaxBodyBytes = smallMax
	}
	body, err := Unframe(kind, payload, lim)
	if err != nil {
		return err
	}
	return unmarshal(kind, body, m)
}
