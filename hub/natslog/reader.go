package natslog

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Message is one batch (or, with Kind set, another entry) read from the
// log.
type Message struct {
	// Seq is the message's stream sequence: its position in the log,
	// increasing within a partition.
	Seq uint64
	// Partition and Device come from the stored subject.
	Partition int
	Device    string
	// Data is the batch as the device published it.
	Data []byte
	// Stored is when the stream stored it.
	Stored time.Time
	// Kind is the message's HeaderKind ("" for a device batch) and ID its
	// Nats-Msg-Id ("" when it has none).
	Kind, ID string
}

// kindAndID reads a stored message's HeaderKind and Nats-Msg-Id.
func kindAndID(msg jetstream.Msg) (kind, id string) {
	h := msg.Headers()
	if h == nil {
		return "", ""
	}
	return h.Get(HeaderKind), h.Get(jetstream.MsgIDHeader)
}

// Reader returns one partition's messages in stream order. It is an
// ordered consumer: it holds no server-side position, and after a
// connection or leader change it resumes after the last sequence it
// returned, so the caller's own position (a checkpoint) is the only one
// that matters. A Reader is used by one goroutine.
type Reader struct {
	partition int
	cons      jetstream.Consumer
	it        jetstream.MessagesContext
}

// Reader opens partition p for reading from stream sequence from on (0 or
// 1: from the oldest message the stream holds).
func (l *Log) Reader(ctx context.Context, p int, from uint64) (*Reader, error) {
	if p < 0 || p >= l.opts.Partitions {
		return nil, fmt.Errorf("%w: partition %d: want 0..%d", ErrInvalidOption, p, l.opts.Partitions-1)
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{PartitionFilter(p)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := l.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("natslog: reader of partition %d from %d: %w", p, from, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("natslog: reader of partition %d from %d: %w", p, from, err)
	}
	return &Reader{partition: p, cons: cons, it: it}, nil
}

// Next waits for the partition's next message until ctx ends. A message
// whose subject does not name a valid device is skipped and returned as
// an error wrapping ErrBadSubject, with its sequence in Message.Seq; the
// next call goes on after it.
func (r *Reader) Next(ctx context.Context) (Message, error) {
	msg, err := r.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		return Message{}, fmt.Errorf("natslog: partition %d: %w", r.partition, err)
	}
	md, err := msg.Metadata()
	if err != nil {
		return Message{}, fmt.Errorf("natslog: partition %d: metadata: %w", r.partition, err)
	}
	m := Message{Seq: md.Sequence.Stream, Data: msg.Data(), Stored: md.Timestamp}
	m.Kind, m.ID = kindAndID(msg)
	m.Partition, m.Device, err = parseLogSubject(msg.Subject())
	if err != nil {
		return Message{Seq: m.Seq}, fmt.Errorf("natslog: partition %d seq %d: %w", r.partition, m.Seq, err)
	}
	return m, nil
}

// Close stops the reader.
func (r *Reader) Close() { r.it.Stop() }
