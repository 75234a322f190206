package cluster

import (
	"edgeflow/hub/lease"
	"log/slog"
	"strings"
	"time"

	"edgeflow/hub/natsbus"
	"edgeflow/hub/natslog"
	"edgeflow/internal/tlsconf"
)

// Options configure cluster mode: the hub reads devices' batches from a
// NATS JetStream stream (package natslog) and talks to devices through
// the NATS servers' MQTT listeners, running no broker of its own. Cluster
// mode is on when URLs is set; it excludes the hub's MQTTURL and the
// embedded broker's options. docs/CLUSTER.md describes it.
type Options struct {
	// URLs are the NATS servers (nats://host:4222, tls://...). Default
	// none: cluster mode off.
	URLs []string
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string
	// User and Password, or Token, authenticate without a credentials
	// file; at most one of the three ways.
	User, Password, Token string
	// TLSCAFile, TLSCertFile and TLSKeyFile are PEM files of the CAs that
	// sign the servers' certificates and of the hub's client certificate
	// (both or neither). Any of them turns TLS on.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// Log is the stream: its name, partition count (fixed for the
	// stream's life), replicas and retention. Zero fields take natslog's
	// defaults (EDGEFLOW, 64, 3, 7 days, 1 GiB).
	Log natslog.Options
	// SnapshotInterval is the time between state snapshots put into the
	// NATS object store (natslog.Snapshots), which a hub started on an
	// empty data directory restores. Default 5 minutes, at least 10
	// seconds.
	SnapshotInterval time.Duration
	// LeaseTTL is how long a partition lease outlives its hub's last
	// renewal (hub/lease Options.TTL): a hub that died is taken over
	// about LeaseTTL later. Every hub of a stream must use the same.
	// Default lease.DefaultTTL (4s), at least 1s.
	LeaseTTL time.Duration
	// CheckpointEvery and CheckpointInterval: a hub saves an owned
	// partition's fenced checkpoint (its position and its devices' state)
	// after CheckpointEvery applied messages of it, or CheckpointInterval
	// after the last save when anything was applied since. Defaults
	// 10,000 messages and 10s.
	CheckpointEvery    int
	CheckpointInterval time.Duration
}

// DefaultCheckpointEvery and DefaultCheckpointInterval are the defaults
// of Options.CheckpointEvery and CheckpointInterval.
const (
	DefaultCheckpointEvery    = 10000
	DefaultCheckpointInterval = 10 * time.Second
)

// DefaultSnapshotInterval is Options.SnapshotInterval's default.
const DefaultSnapshotInterval = 5 * time.Minute

// MinSnapshotInterval bounds how often a hub stores its whole state.
const MinSnapshotInterval = 10 * time.Second

// PollInterval is the time between fullness polls of the stream.
const PollInterval = 5 * time.Second

// Enabled reports whether cluster mode is on.
func (n *Options) Enabled() bool { return len(n.URLs) > 0 }

// BusOptions are the transport's options; name, timeout and logger are
// the hub's client id, publish timeout and logger.
func (n *Options) BusOptions(name string, timeout time.Duration, logger *slog.Logger) natsbus.Options {
	return natsbus.Options{URLs: n.URLs, CredsFile: n.CredsFile, User: n.User, Password: n.Password, Token: n.Token,
		TLS:  tlsconf.Files{CAFile: n.TLSCAFile, CertFile: n.TLSCertFile, KeyFile: n.TLSKeyFile},
		Name: name, Timeout: timeout, Logger: logger}
}

// EnsureDefaults fills the stream's defaults in cluster mode.
func (n *Options) EnsureDefaults() {
	if n.Enabled() {
		n.Log.EnsureDefaults()
		if n.SnapshotInterval == 0 {
			n.SnapshotInterval = DefaultSnapshotInterval
		}
		if n.LeaseTTL == 0 {
			n.LeaseTTL = lease.DefaultTTL
		}
		if n.CheckpointEvery == 0 {
			n.CheckpointEvery = DefaultCheckpointEvery
		}
		if n.CheckpointInterval == 0 {
			n.CheckpointInterval = DefaultCheckpointInterval
		}
	}
}

// Validate checks the options, naming fields NATS.* through bad, which
// builds the error (the hub's Options.Validate wording). Without URLs it
// only refuses credentials or TLS set for no server. The hub checks what
// cluster mode excludes among its own options before calling it.
func (n *Options) Validate(bad func(field, format string, args ...any) error) error {
	if !n.Enabled() {
		if n.CredsFile != "" || n.User != "" || n.Token != "" || n.TLSCAFile != "" || n.TLSCertFile != "" {
			return bad("NATS.URLs", "NATS credentials or TLS are set without NATS servers")
		}
		return nil
	}
	auth := 0
	for _, set := range []bool{n.CredsFile != "", n.User != "" || n.Password != "", n.Token != ""} {
		if set {
			auth++
		}
	}
	switch {
	case auth > 1:
		return bad("NATS.CredsFile", "NATS.CredsFile, NATS.User (with NATS.Password) and NATS.Token: set one way to authenticate")
	case (n.User == "") != (n.Password == ""):
		return bad("NATS.User", "NATS.User and NATS.Password go together")
	case (n.TLSCertFile == "") != (n.TLSKeyFile == ""):
		return bad("NATS.TLSCertFile", "NATS.TLSCertFile and NATS.TLSKeyFile go together")
	}
	if n.SnapshotInterval != 0 && n.SnapshotInterval < MinSnapshotInterval {
		return bad("NATS.SnapshotInterval", "%v: want at least %v", n.SnapshotInterval, MinSnapshotInterval)
	}
	switch {
	case n.LeaseTTL != 0 && n.LeaseTTL < time.Second:
		return bad("NATS.LeaseTTL", "%v: want at least 1s", n.LeaseTTL)
	case n.CheckpointEvery < 0:
		return bad("NATS.CheckpointEvery", "%d: want a positive count", n.CheckpointEvery)
	case n.CheckpointInterval < 0 || (n.CheckpointInterval != 0 && n.CheckpointInterval < 100*time.Millisecond):
		return bad("NATS.CheckpointInterval", "%v: want at least 100ms", n.CheckpointInterval)
	}
	bo := n.BusOptions("", 0, nil) // Validate checks URLs, credentials and TLS only
	if err := bo.Validate(); err != nil {
		return bad("NATS.URLs", "%s", strings.TrimPrefix(err.Error(), "natsbus: URLs: "))
	}
	l := n.Log
	l.EnsureDefaults()
	if err := l.Validate(); err != nil {
		// natslog names the field: "natslog: invalid option: Partitions 0: ..."
		msg := err.Error()
		for _, f := range []string{"Stream", "Partitions", "Replicas", "MaxAge", "MaxBytes"} {
			if strings.Contains(msg, ": "+f+" ") {
				return bad("NATS."+f, "%s", strings.TrimPrefix(msg, natslog.ErrInvalidOption.Error()+": "))
			}
		}
		return bad("NATS.Log", "%v", err)
	}
	return nil
}

// SnapOptions are the snapshot buckets' options: natslog's defaults with
// the stream's replica count, and the bucket named after the stream
// (EDGEFLOW_SNAPSHOTS for the default stream), so hubs of two streams on
// one NATS cluster keep apart; a stream name too long for that shares
// the default bucket, and the stream name inside each snapshot keeps a
// hub from restoring another stream's.
func (n *Options) SnapOptions() natslog.SnapshotOptions {
	o := natslog.SnapshotOptions{Replicas: n.Log.Replicas}
	if b := n.Log.Stream + "_SNAPSHOTS"; len(b) <= 59 && n.Log.Stream != "" {
		o.Bucket = b
	}
	return o
}

// SnapMaxBytes is the largest snapshot the store takes.
func (n *Options) SnapMaxBytes() int64 {
	o := n.SnapOptions()
	o.EnsureDefaults()
	return o.MaxBytes
}
