package lease_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/lease"
	"edgeflow/hub/natslog"
)

// Example shows a hub holding its share of 64 partitions: claim each
// acquired partition's checkpoint with its epoch, write a final one on
// handoff, drop the state on loss, and hand everything over on shutdown.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	cps, err := natslog.OpenPartitionCheckpoints(ctx, js, natslog.PartitionCheckpointOptions{})
	if err != nil {
		log.Fatal(err)
	}
	m, err := lease.Open(ctx, js, lease.Options{
		HubID:      "hub-1",
		Partitions: 64,
		Callbacks: lease.Callbacks{
			Acquired: func(p int, epoch uint64) {
				if err := cps.Claim(ctx, p, epoch); err != nil {
					log.Printf("partition %d: %v", p, err) // a newer epoch exists: do not apply it
					return
				}
				// Load the checkpoint and replay the partition from its position.
			},
			Handoff: func(p int, epoch uint64) {
				// Stop applying p, then save its final state under epoch.
				_ = cps.Save(ctx, p, epoch, []byte("state"))
				_ = cps.Release(ctx, p, epoch)
			},
			Lost: func(p int, epoch uint64, reason lease.Reason) {
				// Stop applying p and drop its state at once.
			},
		},
	})
	if err != nil {
		log.Fatal(err) // lease.ErrDuplicateHub: another live hub has this id
	}
	runCtx, cancel := context.WithCancel(ctx)
	go func() { _ = m.Run(runCtx) }()
	// ... serve; before applying a message of partition p: m.Owns(p) ...
	stopCtx, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	_ = m.Stop(stopCtx) // hands every partition over
	cancel()
}
