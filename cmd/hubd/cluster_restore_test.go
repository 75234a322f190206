package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"edgeflow/hub/natslog"
	"edgeflow/internal/testnats"
	"edgeflow/wire/wirepb"
)

// TestClusterSnapshotIntervalKey reads nats-snapshot-interval from a
// file, HUBD_NATS_SNAPSHOT_INTERVAL and the flag, and refuses one under
// 10s naming the key.
func TestClusterSnapshotIntervalKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hubd.yaml")
	if err := os.WriteFile(file, []byte("nats-url: nats://a:4222\nnats-snapshot-interval: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.hub.NATS.SnapshotInterval; got != time.Minute {
		t.Fatalf("from the file: %v", got)
	}
	t.Setenv("HUBD_NATS_SNAPSHOT_INTERVAL", "2m")
	if cfg, err = loadConfig([]string{"--config", file}); err != nil || cfg.hub.NATS.SnapshotInterval != 2*time.Minute {
		t.Fatalf("from the environment: %v %v", cfg.hub.NATS.SnapshotInterval, err)
	}
	if cfg, err = loadConfig([]string{"--config", file, "--nats-snapshot-interval", "30s"}); err != nil || cfg.hub.NATS.SnapshotInterval != 30*time.Second {
		t.Fatalf("from the flag: %v %v", cfg.hub.NATS.SnapshotInterval, err)
	}
	var stderr lockedBuf
	code := run([]string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-url", "nats://127.0.0.1:4222", "--nats-snapshot-interval", "5s"}, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "nats-snapshot-interval") {
		t.Fatalf("nats-snapshot-interval 5s: exit %d, %s", code, stderr.String())
	}
}

// TestBinaryClusterRestore: hubd in cluster mode stores a state snapshot
// (nats-snapshot-interval 10s), is SIGKILLed, its data directory wiped and
// the stream purged up to the snapshot's lowest position (standing in for
// retention); restarted on the empty directory it restores the snapshot,
// reads the rest of the stream and holds every batch once.
func TestBinaryClusterRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs hubd and nats-server")
	}
	c := testnats.Start(t, 1)
	data := t.TempDir()
	h := startClusterHubd(t, c, data, "--nats-snapshot-interval", "10s", "--checkpoint-interval", "1s")
	h.waitReady(t)
	devs := []*natsDevice{newNATSDevice(t, c.Nodes[0].MQTTURL(), "dev-a"), newNATSDevice(t, c.Nodes[0].MQTTURL(), "dev-b"),
		newNATSDevice(t, c.Nodes[0].MQTTURL(), "dev-c")}
	for _, d := range devs {
		for k := range 10 {
			d.send(t, k)
		}
	}
	for _, d := range devs {
		d.waitAcks(t, 10, wirepb.AckStatus_ACK_STATUS_OK)
	}
	deadline := time.Now().Add(60 * time.Second)
	for metricValue(t, h.http, `edgeflow_hub_snapshot_uploads_total{result="ok"}`) == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot stored after 60s:\n%s", h.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, d := range devs {
		for k := 10; k < 15; k++ {
			d.send(t, k)
		}
		d.waitAcks(t, 15, wirepb.AckStatus_ACK_STATUS_OK)
	}
	h.kill(t)
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	snaps, err := natslog.OpenSnapshots(ctx, js, natslog.SnapshotOptions{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snaps.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	low := uint64(0)
	for _, seq := range snap.Positions {
		if low == 0 || seq < low {
			low = seq
		}
	}
	stream, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(low+1)); err != nil {
		t.Fatal(err)
	}

	h = startClusterHubd(t, c, data)
	h.waitReady(t)
	checkStreams(t, h, devs, 15)
	if !strings.Contains(h.out.String(), "restored the state snapshot") {
		t.Fatalf("hubd did not say it restored the snapshot:\n%s", h.out.String())
	}
	if v := metricValue(t, h.http, `edgeflow_hub_snapshot_restores_total{result="latest"}`); v != "1" {
		t.Fatalf("restores counted %q", v)
	}
	t.Logf("restored generation %d, positions %v, purged up to %s", snap.Generation, snap.Positions, strconv.FormatUint(low, 10))
}
