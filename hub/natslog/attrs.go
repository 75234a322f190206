package natslog

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/wire"
)

// HeaderKind is the message header that marks a stream message that is
// not a device batch; its value is the entry's kind (KindAttrs). A device
// cannot set it: NATS' MQTT listener (MQTT 3.1.1) carries no user
// headers, so every message a device publishes arrives without it.
const HeaderKind = "Edgeflow-Kind"

// KindAttrs is HeaderKind's value on a device attribute version written
// by a hub (its payload is package attrs' EncodeVersion).
const KindAttrs = "attrs"

// maxAttrsInFlight bounds the attribute versions PublishAttrs has sent
// and not yet seen stored.
const maxAttrsInFlight = 256

// Entry is one non-batch entry to publish on a device's partition.
type Entry struct {
	Device string
	Data   []byte
	// ID is the message's Nats-Msg-Id: the stream drops a second message
	// with the same ID within its duplicate window, and a reader sees it
	// in Message.ID.
	ID string
}

// PublishAttrs appends each entry as a KindAttrs message on its device's
// batch subject, so the stream's transform stores it in the device's
// partition, in order with the device's batches. It returns each entry's
// stream sequence once a quorum holds it; on an error, the entries before
// the index it names are stored (their sequences are set), the rest may
// or may not be.
func (l *Log) PublishAttrs(ctx context.Context, es []Entry) ([]uint64, error) {
	for i, e := range es {
		if err := wire.ValidateDeviceID(e.Device); err != nil {
			return nil, fmt.Errorf("natslog: publish attributes, entry %d: %w", i, err)
		}
	}
	seqs := make([]uint64, len(es))
	futs := make([]jetstream.PubAckFuture, 0, maxAttrsInFlight)
	wait := func(base int) error {
		for j, f := range futs {
			select {
			case ack := <-f.Ok():
				seqs[base+j] = ack.Sequence
			case err := <-f.Err():
				return fmt.Errorf("natslog: publish attributes of %s (entry %d): %w", es[base+j].Device, base+j, err)
			case <-ctx.Done():
				return fmt.Errorf("natslog: publish attributes of %s (entry %d): %w", es[base+j].Device, base+j, ctx.Err())
			}
		}
		futs = futs[:0]
		return nil
	}
	base := 0
	for i, e := range es {
		m := nats.NewMsg(BatchSubject(e.Device))
		m.Header.Set(HeaderKind, KindAttrs)
		m.Data = e.Data
		opts := []jetstream.PublishOpt{jetstream.WithExpectStream(l.opts.Stream)}
		if e.ID != "" {
			opts = append(opts, jetstream.WithMsgID(e.ID))
		}
		f, err := l.js.PublishMsgAsync(m, opts...)
		if err != nil {
			if werr := wait(base); werr != nil {
				return seqs, werr
			}
			return seqs, fmt.Errorf("natslog: publish attributes of %s (entry %d): %w", e.Device, i, err)
		}
		futs = append(futs, f)
		if len(futs) == maxAttrsInFlight {
			if err := wait(base); err != nil {
				return seqs, err
			}
			base = i + 1
		}
	}
	return seqs, wait(base)
}
