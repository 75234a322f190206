package hub

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"edgeflow/hub/hublog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// syncPath is the hub's message path run synchronously on real parts (a
// Server's decode, the committer on a real store, the applier), for the
// fuzz target.
type syncPath struct {
	s *Server
}

func newSyncPath(t testing.TB) *syncPath {
	o := testOptions(t, t.TempDir())
	o.NoSync, o.Consumers = true, []Consumer{newCountingConsumer()}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if s.st, err = hublog.OpenStore(o.DataDir, false, s.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.st.Close() })
	if err := s.recoverState(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &syncPath{s: s}
}

// handle runs one message through decode, commit, ack and apply, and the
// logged entry through the replay decoder. It returns the ack, or an error
// for a message that cannot be answered (bad topic).
func (p *syncPath) handle(topic string, payload []byte) (*wirepb.Ack, error) {
	s := p.s
	device, kind, err := wire.ParseTopic(topic)
	if err != nil {
		return nil, err
	}
	if kind != wire.KindBatch {
		s.handle(topic, payload) // statuses etc.: must not panic
		select {
		case pd := <-s.com.in:
			if err := s.com.commit([]*pending{pd}); err != nil {
				return nil, err
			}
			return nil, s.app.applyEntry(&pd.entry, nil)
		default:
			return nil, nil
		}
	}
	pd := s.decode(inMsg{device: device, payload: payload, serverTimeNs: baseTimeNs})
	if err := s.com.commit([]*pending{pd}); err != nil {
		return nil, err
	}
	m, ok := s.ackMessage(pd.device, s.ackFor(pd))
	if !ok {
		return nil, nil
	}
	ack, err := wire.DecodeAck(m.Payload, wire.Limits{})
	if err != nil {
		return nil, err
	}
	if pd.accepted {
		if err := s.app.applyEntry(&pd.entry, pd.view); err != nil {
			return nil, err
		}
		e, err := hublog.DecodeEntry(pd.entry.Seq, pd.entry.Encode())
		if err != nil {
			return nil, err
		}
		if _, err := s.app.parseStored(e); err != nil {
			return nil, err
		}
	}
	return ack, nil
}

// FuzzHandleBatch feeds arbitrary bytes on arbitrary topics through the
// batch path: it must never panic and must answer every batch topic with
// an ack (or an error for an unusable topic).
func FuzzHandleBatch(f *testing.F) {
	sid := wire.NewStreamID()
	good := makeBatch("d1", sid, 1, 3)
	big := makeBatch("d1", sid, 100, 400) // compressed frame
	f.Add("edge/v1/d1/batch", encodeBatch(f, good))
	f.Add("edge/v1/d1/batch", encodeBatch(f, big))
	f.Add("edge/v1/d2/batch", encodeBatch(f, good))
	f.Add("edge/v1/d1/status", []byte{0xE7, 1, 0, 5})
	f.Add("edge/v1/d1/batch", []byte{0xE7, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add("nope", []byte("x"))
	p := newSyncPath(f)
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		ack, err := p.handle(topic, payload)
		if n := counterValue(t, p.s.m.panics); n != 0 {
			t.Fatalf("recovered %v panics", n)
		}
		_, kind, terr := wire.ParseTopic(topic)
		if terr == nil && kind == wire.KindBatch && err == nil && ack == nil {
			t.Fatalf("batch topic answered with neither an ack nor an error")
		}
		if ack != nil && ack.Status == wirepb.AckStatus_ACK_STATUS_REJECTED && ack.Reason == "" {
			t.Fatalf("rejection without a reason")
		}
	})
}

// counterValue reads a counter.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
