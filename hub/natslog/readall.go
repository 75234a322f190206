package natslog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// readAllBufferBytes bounds the bytes an AllReader's consumer buffers
// in the client: reading a retained stream of any size holds about this
// much at a time. A refill pull may ask for only half of it, so it must be twice
// the largest message (NATS' max_payload is 1 MB by default, a hub's
// largest frame 8 MiB) or the reader stalls.
const readAllBufferBytes = 32 << 20

// Retained is what the stream holds now: the sequences FirstSeq..LastSeq
// (Messages of them; none when Messages is 0) and when its first message
// was stored. A FirstSeq above 1 means the messages before it are gone
// (retention dropped them, or an operator purged them).
type Retained struct {
	Messages, FirstSeq, LastSeq uint64
	FirstTime                   time.Time
}

// Retained asks the stream's leader what it holds.
func (l *Log) Retained(ctx context.Context) (Retained, error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return Retained{}, fmt.Errorf("natslog: stream %s info: %w", l.opts.Stream, err)
	}
	st := info.State
	return Retained{Messages: st.Msgs, FirstSeq: st.FirstSeq, LastSeq: st.LastSeq, FirstTime: st.FirstTime}, nil
}

// AllReader returns the messages of every partition in stream order, from
// a start sequence up to a bound per partition, then io.EOF. It is what a
// hub restored from a state snapshot reads to fill its local log with the
// batches the snapshot's state already holds. Its consumer buffers at
// most about 32 MiB in the client. An AllReader is used by one goroutine.
type AllReader struct {
	upTo map[int]uint64
	end  uint64 // the highest bound: no message after it is returned
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	done bool
}

// ReaderAll opens a reader of every partition from stream sequence from
// on (0 or 1: from the oldest message the stream holds) that returns
// partition p's messages up to and including sequence upTo[p], skips
// partitions upTo does not name, and ends (io.EOF) after the highest
// bound or at the stream's last message, whichever comes first. A stream
// that holds nothing in that span ends at once.
func (l *Log) ReaderAll(ctx context.Context, from uint64, upTo map[int]uint64) (*AllReader, error) {
	r := &AllReader{upTo: maps.Clone(upTo)}
	for p, seq := range upTo {
		if p < 0 || p >= l.opts.Partitions {
			return nil, fmt.Errorf("%w: partition %d: want 0..%d", ErrInvalidOption, p, l.opts.Partitions-1)
		}
		r.end = max(r.end, seq)
	}
	from = max(from, 1)
	held, err := l.Retained(ctx)
	if err != nil {
		return nil, err
	}
	if r.end < from || held.Messages == 0 || held.LastSeq < from || held.FirstSeq > r.end {
		r.done = true
		return r, nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := l.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("natslog: reader of every partition from %d: %w", from, err)
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(readAllBufferBytes))
	if err != nil {
		return nil, fmt.Errorf("natslog: reader of every partition from %d: %w", from, err)
	}
	r.cons, r.it = cons, it
	return r, nil
}

// End is the highest sequence the reader may return.
func (r *AllReader) End() uint64 { return r.end }

// Next waits until ctx ends for the next message within the bounds and
// returns it, or io.EOF once past them. A message whose subject does not
// name a valid device is returned as an error wrapping ErrBadSubject,
// with its sequence in Message.Seq; the next call goes on after it. Each
// message read, returned or skipped, moves Message.Seq of the next one
// on, so a caller that records the last Seq it handled can resume there.
func (r *AllReader) Next(ctx context.Context) (Message, error) {
	for {
		if r.done {
			return Message{}, io.EOF
		}
		msg, err := r.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				r.done = true
				return Message{}, io.EOF
			}
			return Message{}, fmt.Errorf("natslog: reading every partition: %w", err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return Message{}, fmt.Errorf("natslog: reading every partition: metadata: %w", err)
		}
		seq := md.Sequence.Stream
		if seq > r.end {
			r.done = true
			return Message{}, io.EOF
		}
		// The last message the stream held when this one was delivered:
		// nothing more within the bounds follows it for now.
		r.done = seq == r.end || md.NumPending == 0
		m := Message{Seq: seq, Data: msg.Data(), Stored: md.Timestamp}
		m.Kind, m.ID = kindAndID(msg)
		m.Partition, m.Device, err = parseLogSubject(msg.Subject())
		if err != nil {
			return Message{Seq: seq}, fmt.Errorf("natslog: seq %d: %w", seq, err)
		}
		if bound, ok := r.upTo[m.Partition]; !ok || seq > bound {
			if r.done {
				return Message{}, io.EOF
			}
			continue
		}
		return m, nil
	}
}

// Close stops the reader.
func (r *AllReader) Close() {
	if r.it != nil {
		r.it.Stop()
	}
}
