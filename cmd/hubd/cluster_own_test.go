package main

import (
	"fmt"
	"strings"
	"testing"

	"edgeflow/internal/testnats"
	"edgeflow/wire/wirepb"
)

// TestBinaryClusterHubsKilled runs two hubd processes on one stream with
// partition leases (hub-id, cluster-lease-ttl 2s, frequent partition
// checkpoints): the second takes its share of the partitions by clean
// handoffs; the first is SIGKILLed while devices keep sending, and the
// second takes its partitions over: it then holds every device, each
// batch applied once, and answers every batch.
func TestBinaryClusterHubsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs hubd and nats-server")
	}
	c := testnats.Start(t, 1)
	flags := func(id string) []string {
		return []string{"--hub-id", id, "--cluster-lease-ttl", "2s", "--cluster-checkpoint-every", "5", "--cluster-checkpoint-interval", "200ms"}
	}
	a := startClusterHubd(t, c, t.TempDir(), flags("hub-a")...)
	a.waitReady(t)
	var devs []*natsDevice
	for i := range 6 {
		devs = append(devs, newNATSDevice(t, c.Nodes[0].MQTTURL(), fmt.Sprintf("dev-%d", i)))
	}
	for _, d := range devs {
		for k := range 10 {
			d.send(t, k)
		}
	}
	for _, d := range devs {
		d.waitAcks(t, 10, wirepb.AckStatus_ACK_STATUS_OK)
	}
	b := startClusterHubd(t, c, t.TempDir(), flags("hub-b")...)
	b.waitReady(t)
	for _, d := range devs {
		for k := 10; k < 20; k++ {
			d.send(t, k)
		}
	}
	a.kill(t)
	for _, d := range devs {
		for k := 20; k < 30; k++ {
			d.send(t, k)
		}
	}
	for _, d := range devs {
		d.waitAcks(t, 30, wirepb.AckStatus_ACK_STATUS_OK, wirepb.AckStatus_ACK_STATUS_DUPLICATE)
	}
	checkStreams(t, b, devs, 30)
	out := b.out.String()
	if !strings.Contains(out, "state_from=checkpoint") {
		t.Fatalf("the surviving hubd imported no partition checkpoint:\n%s", out)
	}
	for p := range 8 {
		if !strings.Contains(out, fmt.Sprintf(`"cluster mode: applying partition" partition=%d `, p)) {
			t.Fatalf("the surviving hubd never applied partition %d:\n%s", p, out)
		}
	}
}
