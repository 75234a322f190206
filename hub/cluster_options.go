package hub

import (
	"strings"
	"time"

	"edgeflow/hub/natsbus"
	"edgeflow/hub/natslog"
	"edgeflow/internal/tlsconf"
)

// NATSOptions configure cluster mode: the hub reads devices' batches from
// a NATS JetStream stream (package natslog) and talks to devices through
// the NATS servers' MQTT listeners, running no broker of its own. Cluster
// mode is on when URLs is set; it excludes MQTTURL and the embedded
// broker's options. docs/CLUSTER.md describes it.
type NATSOptions struct {
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
}

// enabled reports whether cluster mode is on.
func (n *NATSOptions) enabled() bool { return len(n.URLs) > 0 }

// busOptions are the transport's options.
func (n *NATSOptions) busOptions(o *Options) natsbus.Options {
	return natsbus.Options{URLs: n.URLs, CredsFile: n.CredsFile, User: n.User, Password: n.Password, Token: n.Token,
		TLS:  tlsconf.Files{CAFile: n.TLSCAFile, CertFile: n.TLSCertFile, KeyFile: n.TLSKeyFile},
		Name: o.ClientID, Timeout: o.PublishTimeout, Logger: o.Logger}
}

// ensureDefaults fills the stream's defaults in cluster mode.
func (n *NATSOptions) ensureDefaults() {
	if n.enabled() {
		n.Log.EnsureDefaults()
		if n.SnapshotInterval == 0 {
			n.SnapshotInterval = DefaultSnapshotInterval
		}
	}
}

// validateNATS checks cluster mode's options, naming fields NATS.*.
func (o *Options) validateNATS(bad func(field, format string, args ...any) error) error {
	n := &o.NATS
	if !n.enabled() {
		if n.CredsFile != "" || n.User != "" || n.Token != "" || n.TLSCAFile != "" || n.TLSCertFile != "" {
			return bad("NATS.URLs", "NATS credentials or TLS are set without NATS servers")
		}
		return nil
	}
	switch {
	case o.MQTTURL != "":
		return bad("NATS.URLs", "cluster mode (NATS.URLs) and an external MQTT broker (MQTTURL) exclude each other: devices connect to the NATS servers' MQTT listeners")
	case o.Group != "":
		return bad("Group", "shared subscriptions are for an external MQTT broker, not cluster mode (NATS.URLs)")
	case o.MQTTAuthFile != "" || o.MQTTTLSCertFile != "" || o.MQTTDenyAnonymous:
		return bad("MQTTAuthFile", "the embedded broker's authentication and TLS do not apply in cluster mode (NATS.URLs): the NATS servers authenticate devices")
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
	if n.SnapshotInterval != 0 && n.SnapshotInterval < minSnapshotInterval {
		return bad("NATS.SnapshotInterval", "%v: want at least %v", n.SnapshotInterval, minSnapshotInterval)
	}
	bo := n.busOptions(o)
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

// DefaultSnapshotInterval is NATSOptions.SnapshotInterval's default.
const DefaultSnapshotInterval = 5 * time.Minute

// minSnapshotInterval bounds how often a hub stores its whole state.
const minSnapshotInterval = 10 * time.Second

// clusterPollInterval is the time between fullness polls of the stream.
const clusterPollInterval = 5 * time.Second
