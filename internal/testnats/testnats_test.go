package testnats

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestClusterSurvivesKillAndRestart starts three nodes, SIGKILLs one, and
// checks that an R3 stream still takes acknowledged writes through the
// other two, and that after Restart JetStream answers through the
// restarted node and it holds the stream again.
func TestClusterSurvivesKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	c := Start(t, 3)
	js := connect(t, c.Nodes[1].URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3}); err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	c.Kill(0)
	// Retried while the stream elects a new leader if n0 led it; the
	// message id keeps a retry of a stored message from storing it twice.
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.Publish(actx, "t.a", []byte("x"), jetstream.WithMsgID("x"))
		acancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("publish to R3 stream with %s down: %v", c.Nodes[0].Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.Restart(0)
	js0 := connect(t, c.Nodes[0].URL())
	for {
		info, err := js0.Stream(ctx, "T")
		if err == nil && info.CachedInfo().State.Msgs == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream T not readable with 1 message through restarted %s: %v", c.Nodes[0].Name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
