package natslog_test

import (
	"bytes"
	"context"
	"testing"

	"edgeflow/hub/natslog"
)

// TestPublishAttrs: attribute entries land in their device's partition,
// in order with the device's batches, with their kind and message ID; a
// batch a device publishes over MQTT arrives without a kind, whatever its
// payload; an entry published again with the same ID is stored once.
func TestPublishAttrs(t *testing.T) {
	c, _, l := startLog(t, 1, natslog.Options{Partitions: 4, Replicas: 1})
	dev := mqttClient(t, c.Nodes[0].MQTTURL(), "edgeflow-site-7")
	p := natslog.PartitionOf("site.7", 4)
	mqttPublish(t, dev, "edge/v1/site.7/batch", []byte("batch one"))
	es := []natslog.Entry{{Device: "site.7", Data: []byte("version a"), ID: "attrs-a"}, {Device: "site.7", Data: []byte("version b"), ID: "attrs-b"}}
	seqs, err := l.PublishAttrs(context.Background(), es)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.PublishAttrs(context.Background(), es[:1]); err != nil { // the same ID again
		t.Fatal(err)
	}
	mqttPublish(t, dev, "edge/v1/site.7/batch", []byte("batch two"))
	ms := readN(t, l, p, 0, 4)
	want := []struct{ kind, id, data string }{{"", "", "batch one"}, {natslog.KindAttrs, "attrs-a", "version a"}, {natslog.KindAttrs, "attrs-b", "version b"}, {"", "", "batch two"}}
	for i, m := range ms {
		if m.Device != "site.7" || m.Partition != p || m.Kind != want[i].kind || m.ID != want[i].id || !bytes.Equal(m.Data, []byte(want[i].data)) {
			t.Fatalf("message %d: %+v, want %+v in partition %d", i, m, want[i], p)
		}
	}
	if ms[1].Seq != seqs[0] || ms[2].Seq != seqs[1] {
		t.Fatalf("sequences %d, %d; PublishAttrs returned %v", ms[1].Seq, ms[2].Seq, seqs)
	}
	if _, err := l.PublishAttrs(context.Background(), []natslog.Entry{{Device: "bad/device", Data: []byte("x")}}); err == nil {
		t.Fatal("an entry for an invalid device id was published")
	}
}
