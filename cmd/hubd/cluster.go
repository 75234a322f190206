package main

import (
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"edgeflow/hub"
	hubcluster "edgeflow/hub/cluster"
	"edgeflow/hub/natslog"
	"edgeflow/internal/confval"
)

// addClusterFlags declares cluster mode's keys: hubd reads devices'
// batches from a NATS JetStream stream and runs no broker of its own
// (docs/CLUSTER.md).
func addClusterFlags(fs *pflag.FlagSet) {
	fs.String("nats-url", "", "cluster mode: NATS servers, comma-separated (nats://host:4222, tls://...); devices connect to their MQTT listeners and hubd runs no broker (excludes mqtt-url)")
	fs.String("nats-creds", "", "cluster mode: NATS credentials file (user JWT and nkey seed)")
	fs.String("nats-user", "", "cluster mode: NATS user (with nats-password)")
	fs.String("nats-password", "", "cluster mode: NATS password (prefer nats-password-file or HUBD_NATS_PASSWORD)")
	fs.String("nats-password-file", "", "cluster mode: file holding the NATS password")
	fs.String("nats-token", "", "cluster mode: NATS authentication token (prefer nats-token-file or HUBD_NATS_TOKEN)")
	fs.String("nats-token-file", "", "cluster mode: file holding the NATS token")
	fs.String("nats-tls-ca", "", "cluster mode: PEM CA bundle of the NATS servers' certificates; any nats-tls-* turns TLS on")
	fs.String("nats-tls-cert", "", "cluster mode: the hub's PEM client certificate for NATS (with nats-tls-key)")
	fs.String("nats-tls-key", "", "cluster mode: the hub's PEM client key for NATS")
	fs.String("nats-stream", natslog.DefaultStream, "cluster mode: the JetStream stream of devices' batches")
	fs.Int("nats-partitions", natslog.DefaultPartitions, "cluster mode: partitions of the stream, 1..1024, fixed for its life (a stream with another count is refused)")
	fs.Int("nats-replicas", natslog.DefaultReplicas, "cluster mode: servers holding each message, 1..5 (a write needs a majority)")
	fs.String("nats-max-age", "168h", "cluster mode: the stream drops messages older than this, applied or not (at least 1m)")
	fs.String("nats-snapshot-interval", "5m", "cluster mode: time between state snapshots put into NATS' object store, which a hub started on an empty data directory restores (at least 10s)")
	fs.String("hub-id", "", "cluster mode: this hub's id among the hubs sharing the stream's partitions (1..64 letters, digits, '-' or '_'); default: generated once and kept in <data-dir>/hub-id")
	fs.String("http-advertise-url", "", "cluster mode: the base URL the other hubs reach this hub's API at (e.g. http://hub-a:8080); default: derived from http-addr (its host, or this machine's host name when it listens on every interface)")
	fs.String("cluster-lease-ttl", "4s", "cluster mode: how long a partition lease outlives its hub's last renewal; a dead hub is taken over about this long after (at least 1s; the same on every hub)")
	fs.Int("cluster-checkpoint-every", hubcluster.DefaultCheckpointEvery, "cluster mode: save an owned partition's fenced checkpoint after this many applied messages of it")
	fs.String("cluster-checkpoint-interval", "10s", "cluster mode: save an owned partition's fenced checkpoint at least this often while it applies messages (at least 100ms)")
	fs.String("nats-max-bytes", "1GiB", "cluster mode: the stream's size bound per server; when full it refuses new batches, which agents keep and resend (at least 1MiB)")
}

// clusterFromViper reads the cluster keys into o.
func clusterFromViper(v *viper.Viper, o *hub.Options) error {
	k := &confval.Keys{Get: v.Get}
	n := &o.NATS
	n.URLs = k.List("nats-url")
	n.CredsFile = k.File("nats-creds")
	n.User = v.GetString("nats-user")
	var err error
	if n.Password, err = secret(v, "nats-password"); err != nil {
		k.Add(err)
	}
	if n.Token, err = secret(v, "nats-token"); err != nil {
		k.Add(err)
	}
	n.TLSCAFile, n.TLSCertFile, n.TLSKeyFile = k.File("nats-tls-ca"), k.File("nats-tls-cert"), k.File("nats-tls-key")
	n.Log.Stream = k.String("nats-stream")
	n.Log.Partitions = k.Int("nats-partitions", 1)
	n.Log.Replicas = k.Int("nats-replicas", 1)
	n.Log.MaxAge = k.Duration("nats-max-age", false)
	n.Log.MaxBytes = k.Size("nats-max-bytes")
	n.SnapshotInterval = k.Duration("nats-snapshot-interval", false)
	o.HubID = v.GetString("hub-id")
	o.HTTPAdvertiseURL = v.GetString("http-advertise-url")
	n.LeaseTTL = k.Duration("cluster-lease-ttl", false)
	n.CheckpointEvery = k.Int("cluster-checkpoint-every", 1)
	n.CheckpointInterval = k.Duration("cluster-checkpoint-interval", false)
	if len(n.URLs) > 0 && v.GetString("mqtt-url") != "" {
		k.Fail("nats-url", "cluster mode (nats-url) and an external MQTT broker (mqtt-url) exclude each other: devices connect to the NATS servers' MQTT listeners")
	}
	if len(n.URLs) > 0 && v.GetBool("demo") {
		k.Fail("nats-url", "the demo runs its own broker and fleet; it does not combine with cluster mode (demo)")
	}
	if len(n.URLs) == 0 {
		// The stream keys have defaults; without nats-url they are unused.
		n.Log = natslog.Options{}
	}
	return k.Err()
}
