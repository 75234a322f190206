package hub

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"edgeflow/wire/wirepb"
)

// TestGroupCommitWait: batches that arrive within GroupCommitWait of the
// previous group commit's end go into one commit (one fsync) instead of
// one each, and every one is acknowledged OK.
func TestGroupCommitWait(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.GroupCommitWait = maxGroupCommitWait
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "dev-g")
	if ack := d.send(makeBatch("dev-g", d.stream, 1, 10)); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("first batch: %v", ack)
	}
	// Five more at once, without waiting for PUBACKs: they reach the hub
	// within the wait that began when the first batch's commit ended.
	for i := range 5 {
		d.c.Publish("edge/v1/dev-g/batch", 1, false, encodeBatch(t, makeBatch("dev-g", d.stream, uint64(11+10*i), 10)))
	}
	for i := range 5 {
		if ack := d.waitAck(uint64(11+10*i), 10*time.Second); ack.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("batch %d: %v", i, ack)
		}
	}
	var m dto.Metric
	if err := s.m.groupBatches.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	if h.GetSampleSum() != 6 || h.GetSampleCount() > 2 {
		t.Fatalf("6 batches in %d group commits (entries %v), want the last five in one", h.GetSampleCount(), h.GetSampleSum())
	}
}
