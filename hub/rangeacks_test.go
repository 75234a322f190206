package hub

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"edgeflow/hub/batchview"
	"edgeflow/hub/hublog"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestAckRoundMerges: a run of consecutive batches of one stream answered
// alike, OK or DUPLICATE, gets one ack when its batches say range_acks, also
// when they come out of order or across the groups of one round; a batch
// without range_acks, a rejection, another status, a gap in the sequence
// numbers or another stream gets an ack of its own.
func TestAckRoundMerges(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	a, b, c := wire.NewStreamID(), wire.NewStreamID(), wire.NewStreamID()
	batch := func(dev string, id wire.StreamID, first, last uint64, ranged bool) *pending {
		return &pending{kind: hublog.KindBatch, device: dev, stream: id, first: first, last: last, rangeAcks: ranged}
	}
	dup := func(p *pending) *pending { p.dup = true; return p }
	rej := func(p *pending) *pending {
		p.rej = &batchview.Rejection{Reason: batchview.ReasonTime, Detail: "event 3 is stamped 2301"}
		return p
	}
	// An ack naming refused events answers its batch alone.
	refused := func(p *pending) *pending {
		p.refused = []*wirepb.Gap{{FirstSeq: p.first, LastSeq: p.first, Reason: "bad_value"}}
		return p
	}
	var r ackRound
	r.add(s, []*pending{
		batch("d1", a, 1, 10, true), batch("d1", a, 21, 30, true), batch("d2", b, 1, 5, true), batch("d1", a, 11, 20, true),
		dup(batch("d2", b, 6, 9, true)),
		batch("d2", b, 10, 12, true), refused(batch("d2", b, 13, 15, true)), batch("d2", b, 16, 20, true),
		rej(batch("d1", a, 31, 40, true)),
		batch("d1", a, 41, 50, true),
		batch("d1", a, 61, 70, true),
		{kind: hublog.KindStatus, device: "d1"},
		batch("d3", c, 1, 10, false), batch("d3", c, 11, 20, false),
		dup(batch("d3", c, 21, 30, true)), dup(batch("d3", c, 31, 40, true)),
	})
	r.add(s, []*pending{batch("d1", a, 71, 80, true)})
	want := []string{ // by device, then sequence number
		"d1 1-30 OK", "d1 31-40 REJECTED", "d1 41-50 OK", "d1 61-80 OK",
		"d2 1-5 OK", "d2 6-9 DUPLICATE", "d2 10-12 OK", "d2 13-15 OK", "d2 16-20 OK",
		"d3 1-10 OK", "d3 11-20 OK", "d3 21-40 DUPLICATE",
	}
	msgs := r.messages(s)
	var got []string
	for _, m := range msgs {
		ack, err := wire.DecodeAck(m.Payload, wire.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		dev, kind, err := wire.ParseTopic(m.Topic)
		if err != nil || kind != wire.KindAck {
			t.Fatalf("ack topic %q: %v", m.Topic, err)
		}
		got = append(got, fmt.Sprintf("%s %d-%d %s", dev, ack.FirstSeq, ack.LastSeq, ack.Status.String()[len("ACK_STATUS_"):]))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("acks\n%q\nwant\n%q", got, want)
	}
	if len(r.arrived) != 16 {
		t.Fatalf("%d arrivals for the ack latency, want one per batch (16)", len(r.arrived))
	}
}

// TestRangeAcksThroughBroker sends a stream's batches at once, so that
// they are committed together, through the embedded broker and through a
// real Mosquitto (whose path may hand the hub a stream's batches out of
// order): with range_acks they are answered by acks that cover them
// exactly, fewer than one each; without it (an agent that predates
// range_acks) by one ack each.
func TestRangeAcksThroughBroker(t *testing.T) {
	for _, c := range []struct {
		broker string
		ranged bool
	}{{"embedded", true}, {"embedded", false}, {"mosquitto", true}, {"mosquitto", false}} {
		ranged := c.ranged
		t.Run(fmt.Sprintf("%s/range_acks=%v", c.broker, ranged), func(t *testing.T) {
			o := testOptions(t, t.TempDir())
			o.GroupCommitWait = maxGroupCommitWait
			url := ""
			if c.broker == "mosquitto" {
				url = startMosquitto(t)
				o.MQTTListen, o.MQTTURL, o.ClientID = "", url, "hub-range-acks"
			}
			s := startHub(t, o)
			if url == "" {
				url = "tcp://" + s.BrokerAddr()
			}
			d := newDevice(t, url, "dev-r")
			first := makeBatch("dev-r", d.stream, 1, 10)
			first.RangeAcks = ranged
			if ack := d.send(first); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
				t.Fatalf("first batch: %v", ack)
			}
			// Eight more without waiting for PUBACKs: they reach the hub
			// within the commit wait that began when the first one's
			// commit ended.
			for i := range 8 {
				b := makeBatch("dev-r", d.stream, uint64(11+10*i), 10)
				b.RangeAcks = ranged
				d.c.Publish(wire.BatchTopic("dev-r"), 1, false, encodeBatch(t, b))
			}
			var acks []*wirepb.Ack
			for next := uint64(11); next <= 90; {
				a := d.waitAck(next, 10*time.Second)
				if a.Status != wirepb.AckStatus_ACK_STATUS_OK || a.LastSeq < next || a.LastSeq > 90 || (a.LastSeq-next+1)%10 != 0 {
					t.Fatalf("ack %d..%d %v: want OK for whole batches within 11..90", a.FirstSeq, a.LastSeq, a.Status)
				}
				if !ranged && a.LastSeq != next+9 {
					t.Fatalf("ack %d..%d answers several batches of an agent without range_acks", a.FirstSeq, a.LastSeq)
				}
				acks = append(acks, a)
				next = a.LastSeq + 1
			}
			if ranged && len(acks) == 8 {
				t.Fatalf("8 batches committed together got 8 acks, want fewer")
			}
			d.mu.Lock()
			n := len(d.acks)
			d.mu.Unlock()
			if n != len(acks)+1 {
				t.Fatalf("%d ack messages, want %d (the first batch's and the ones that cover 11..90)", n, len(acks)+1)
			}
			// The counter goes up once Publish has returned, which may be
			// after the device has the acks.
			waitFor(t, func() bool { return counterValue(t, s.m.ackMessages) == float64(n) })
		})
	}
}
