package sinks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsTarget publishes window rows to a JetStream stream, one message per
// row on Subject.<metric>, its body the row as JSON (the windows table's
// columns and "id"), its Nats-Msg-Id the row's identity: sink, metric,
// window, group, start, final and revision (and the log position for
// provisional rows). With Config.Events it also publishes every event on
// Subject.events, its Nats-Msg-Id device/stream/seq. The sink's position is a key of a JetStream key-value bucket,
// written after the stream acknowledged every message of the step, with a
// compare-and-set on its revision. A crash between the two republishes the
// step's messages under the same ids, which JetStream drops as duplicates
// within the stream's duplicate window (and a consumer can drop by id).
type natsTarget struct {
	cfg   Config
	prod  producer
	nc    *nats.Conn
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	rev   uint64 // the position key's revision, 0 when absent
	names []string
}

func newNATSTarget(cfg Config, prod producer) *natsTarget {
	return &natsTarget{cfg: cfg, prod: prod, names: prod.schema().names()}
}

func (t *natsTarget) connected() bool { return t.nc != nil && t.nc.IsConnected() }

func (t *natsTarget) close() {
	if t.nc != nil {
		t.nc.Close()
		t.nc = nil
	}
}

// open connects, creates the stream and the bucket when absent, and loads
// the position.
func (t *natsTarget) open(ctx context.Context) (state, error) {
	nc, err := nats.Connect(t.cfg.URL, nats.Name("edgeflow-sink-"+t.cfg.Name), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return state{}, fmt.Errorf("connect %s: %w", t.cfg.URL, err)
	}
	st, err := t.prepare(ctx, nc)
	if err != nil {
		nc.Close()
		return state{}, err
	}
	t.nc = nc
	return st, nil
}

func (t *natsTarget) prepare(ctx context.Context, nc *nats.Conn) (state, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return state{}, err
	}
	if _, err := js.Stream(ctx, t.cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: t.cfg.Stream, Subjects: []string{t.cfg.Subject + ".>"},
			Duplicates: 2 * time.Minute})
		if err != nil {
			return state{}, fmt.Errorf("create stream %s: %w", t.cfg.Stream, err)
		}
	} else if err != nil {
		return state{}, fmt.Errorf("stream %s: %w", t.cfg.Stream, err)
	}
	kv, err := js.KeyValue(ctx, t.cfg.PositionsTable)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: t.cfg.PositionsTable})
	}
	if err != nil {
		return state{}, fmt.Errorf("key-value bucket %s: %w", t.cfg.PositionsTable, err)
	}
	t.js, t.kv, t.rev = js, kv, 0
	e, err := kv.Get(ctx, t.cfg.Name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return state{}, nil
	}
	if err != nil {
		return state{}, fmt.Errorf("read position from bucket %s: %w", t.cfg.PositionsTable, err)
	}
	st, err := decodeNATSState(e.Value())
	if err != nil {
		return state{}, fmt.Errorf("bucket %s key %s: %w", t.cfg.PositionsTable, t.cfg.Name, err)
	}
	t.rev = e.Revision()
	return st, nil
}

// encodeNATSState is the position key's value: "position watermarkNs".
func encodeNATSState(st state) []byte {
	wm := int64(0)
	if !st.wm.IsZero() {
		wm = st.wm.UnixNano()
	}
	return []byte(strconv.FormatUint(st.pos, 10) + " " + strconv.FormatInt(wm, 10))
}

func decodeNATSState(b []byte) (state, error) {
	p, w, ok := strings.Cut(string(b), " ")
	pos, err1 := strconv.ParseUint(p, 10, 64)
	wm, err2 := strconv.ParseInt(w, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return state{}, fmt.Errorf("position %q is not \"position watermark_ns\"", b)
	}
	st := state{pos: pos}
	if wm != 0 {
		st.wm = time.Unix(0, wm).UTC()
	}
	return st, nil
}

// commit publishes every window update and event, waits for the stream's
// acknowledgements, then moves the position.
func (t *natsTarget) commit(ctx context.Context, out output, prev, next state) (int64, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(out.rows)+len(out.events))
	publish := func(msg *nats.Msg) error {
		f, err := t.js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("publish to %s: %w", msg.Subject, err)
		}
		futures = append(futures, f)
		return nil
	}
	for _, r := range out.rows {
		metric, body, id, err := updateMessage(t.cfg.Name, t.names, r)
		if err != nil {
			return 0, err
		}
		if err := publish(t.message(t.cfg.Subject+"."+metric, body, id)); err != nil {
			return 0, err
		}
	}
	for _, r := range out.events {
		body, id, err := eventMessage(r)
		if err != nil {
			return 0, err
		}
		if err := publish(t.message(t.cfg.Subject+"."+eventsToken, body, id)); err != nil {
			return 0, err
		}
	}
	written := int64(0)
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if !ack.Duplicate {
				written++
			}
		case err := <-f.Err():
			return 0, fmt.Errorf("publish to %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Second):
			return 0, fmt.Errorf("publish to %s: no acknowledgement from stream %s within 10s", f.Msg().Subject, t.cfg.Stream)
		}
	}
	var (
		rev uint64
		err error
	)
	if t.rev == 0 {
		rev, err = t.kv.Create(ctx, t.cfg.Name, encodeNATSState(next))
	} else {
		rev, err = t.kv.Update(ctx, t.cfg.Name, encodeNATSState(next), t.rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || (err != nil && strings.Contains(err.Error(), "wrong last sequence")) {
		return 0, fmt.Errorf("%w: bucket %s key %s no longer holds position %d: %v", ErrPositionMoved, t.cfg.PositionsTable, t.cfg.Name, prev.pos, err)
	}
	if err != nil {
		return 0, fmt.Errorf("write position to bucket %s: %w", t.cfg.PositionsTable, err)
	}
	t.rev = rev
	return written, nil
}

// message is a JetStream message with its deduplication id.
func (t *natsTarget) message(subject string, body []byte, id string) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, id)
	return msg
}
