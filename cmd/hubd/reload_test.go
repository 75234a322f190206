package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"edgeflow/hub"
	"edgeflow/hub/broker"
)

// TestSIGHUPReloadsCredentials sends the test process a real SIGHUP, as an
// operator would send hubd, and checks that the running hub's embedded
// broker then knows the device added to its credentials file.
func TestSIGHUPReloadsCredentials(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "passwd")
	line := func(dev, pw string) string {
		l, err := broker.HashPassword(dev, []byte(pw), 4)
		if err != nil {
			t.Fatal(err)
		}
		return l + "\n"
	}
	if err := os.WriteFile(file, []byte(line("dev-a", "pa")), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := hub.New(hub.Options{DataDir: filepath.Join(dir, "data"), HTTPAddr: "off", MQTTListen: "127.0.0.1:0",
		MQTTAuthFile: file, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var logs syncBuffer
	done := make(chan struct{})
	go func() { defer close(done); reloadOnHUP(ctx, hup, srv, slog.New(slog.NewTextHandler(&logs, nil))) }()

	if err := os.WriteFile(file, []byte(line("dev-a", "pa")+line("dev-b", "pb")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(logs.String(), "credentials reloaded") {
		time.Sleep(10 * time.Millisecond) // the test's timeout bounds this
	}
	if !strings.Contains(logs.String(), "devices=2") {
		t.Fatalf("log: %s", logs.String())
	}
	cancel()
	<-done
}
