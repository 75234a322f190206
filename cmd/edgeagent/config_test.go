package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgeflow/buffer"
	"edgeflow/uplink"
)

func noEnv(string) string { return "" }

func TestConfigBadValuesNameTheKey(t *testing.T) {
	base := []string{"--device-id", "dev-1"}
	cases := []struct {
		args []string
		key  string
	}{
		{[]string{}, "device-id"},
		{[]string{"--device-id", "a/b"}, "device-id"},
		{append(base, "--durability", "always"), "durability"},
		{append(base, "--profile", "tiny"), "profile"},
		{append(base, "--sync-interval", "soon"), "sync-interval"},
		{append(base, "--buffer-max-bytes", "lots"), "buffer-max-bytes"},
		{append(base, "--buffer-max-bytes", "1KiB"), "buffer-max-bytes"},
		{append(base, "--buffer-max-age", "-1h"), "buffer-max-age"},
		{append(base, "--buffer-full-policy", "ignore"), "buffer-full-policy"},
		{append(base, "--buffer-compression", "zstd"), "buffer-compression"},
		{append(base, "--page-out", "sometimes"), "page-out"},
		{append(base, "--mqtt-url", "http://hub:1883"), "mqtt-url"},
		{append(base, "--mqtt-url", ""), "mqtt-url"},
		{append(base, "--listen", "8181"), "listen"},
		{append(base, "--udp-listen", "nowhere"), "udp-listen"},
		{append(base, "--max-body-bytes", "10"), "max-body-bytes"},
		{append(base, "--batch-max-events", "0"), "batch-max-events"},
		{append(base, "--batch-window", "0"), "batch-window"},
		{append(base, "--batch-window", "5000"), "batch-window"},
		{append(base, "--compression", "gzip"), "compression"},
		{append(base, "--log-level", "loud"), "log-level"},
		{append(base, "--memory-limit", "1MiB"), "memory-limit"},
		{append(base, "--tls-ca-file", "/nonexistent/ca.pem"), "tls-ca-file"},
		{append(base, "--mqtt-password-file", "/nonexistent/pw"), "mqtt-password-file"},
		{append(base, "--drain-timeout", "1y"), "drain-timeout"},
		{append(base, "--first-sync-wait", "2m"), "first-sync-wait"},
		{append(base, "--first-sync-wait", "-1s"), "first-sync-wait"},
		{append(base, "--first-sync-wait", "2"), "first-sync-wait"},
		{append(base, "--mqtt-client-id", strings.Repeat("c", 257)), "mqtt-client-id"},
		{append(base, "--mqtt-ack-qos", "2"), "mqtt-ack-qos"},
		{append(base, "--mqtt-ack-qos", "-1"), "mqtt-ack-qos"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, err := loadConfig(c.args, noEnv)
			if err == nil || !strings.Contains(err.Error(), `config key "`+c.key+`"`) {
				t.Fatalf("err %v, want one naming %q", err, c.key)
			}
		})
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edgeagent.yaml")
	yaml := "device-id: from-file\ndata-dir: /file/dir\nntp-servers: [a.example, b.example]\ndurability: sync\nbuffer-max-bytes: 64MiB\nbuffer-max-age: 24h\nprofile: default\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGEAGENT_DATA_DIR", "/env/dir")
	t.Setenv("EDGEAGENT_MQTT_URL", "tcp://h1:1883, tcp://h2:1883")
	t.Setenv("EDGEAGENT_MQTT_CLIENT_ID", "edgeflow-site-7")
	t.Setenv("EDGEAGENT_MQTT_ACK_QOS", "0")
	c, err := loadConfig([]string{"--config", file, "--durability", "none"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	o := c.agent
	if o.DeviceID != "from-file" || o.DataDir != "/env/dir" || o.Buffer.Durability != buffer.DurabilityNone ||
		o.Stream.MaxBytes != 64<<20 || o.Stream.MaxAge != 24*time.Hour || o.Buffer.Profile != buffer.ProfileDefault {
		t.Errorf("options %+v", o)
	}
	if strings.Join(o.NTPServers, ",") != "a.example,b.example" || strings.Join(o.Uplink.Brokers, ",") != "tcp://h1:1883,tcp://h2:1883" {
		t.Errorf("lists: ntp %q brokers %q", o.NTPServers, o.Uplink.Brokers)
	}
	if c.memoryLimit != 0 {
		t.Errorf("default profile got a memory limit %d", c.memoryLimit)
	}
	if o.Uplink.ClientID != "edgeflow-site-7" {
		t.Errorf("client id %q from EDGEAGENT_MQTT_CLIENT_ID", o.Uplink.ClientID)
	}
	if o.Uplink.AckQoS != uplink.AckQoSAtMostOnce {
		t.Errorf("ack qos %d from EDGEAGENT_MQTT_ACK_QOS=0, want AckQoSAtMostOnce", o.Uplink.AckQoS)
	}
}

func TestConfigFileUnknownKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("device-id: d\ndurabilty: sync\n"), 0o600)
	if _, err := loadConfig([]string{"--config", file}, noEnv); err == nil || !strings.Contains(err.Error(), `config key "durabilty": unknown`) {
		t.Fatalf("err %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig([]string{"--device-id", "d", "--ntp-servers", ""}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	o := c.agent
	if o.HTTPAddr != "127.0.0.1:8181" || len(o.NTPServers) != 0 || !o.TimeHub || o.Buffer.Profile != buffer.ProfileLowMemory ||
		o.Stream.MaxBytes != 256<<20 || o.MaxBodyBytes != 1<<20 || c.memoryLimit != defaultLowMemoryLimit {
		t.Errorf("defaults %+v memory limit %d", o, c.memoryLimit)
	}
	if o.Uplink.AckQoS != 1 {
		t.Errorf("ack qos %d by default, want 1", o.Uplink.AckQoS)
	}
	c, _ = loadConfig([]string{"--device-id", "d"}, func(k string) string {
		if k == "GOMEMLIMIT" {
			return "64MiB"
		}
		return ""
	})
	if c.memoryLimit != 0 {
		t.Errorf("GOMEMLIMIT set, yet memory-limit defaulted to %d", c.memoryLimit)
	}
}

// TestExampleConfigLoads keeps configs/edgeagent.yaml valid.
func TestExampleConfigLoads(t *testing.T) {
	c, err := loadConfig([]string{"--config", "../../configs/edgeagent.yaml"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.agent.DeviceID == "" {
		t.Error("example config has no device id")
	}
}

// TestConfigPageOut maps page-out to the buffer's interval: empty leaves the
// profile's default, off turns it off.
func TestConfigPageOut(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want time.Duration
	}{{"", 0}, {"off", -1}, {"250ms", 250 * time.Millisecond}} {
		cfg, err := loadConfig([]string{"--device-id", "dev-1", "--page-out", c.arg}, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.agent.Buffer.PageOutInterval; got != c.want {
			t.Errorf("page-out %q: interval %v, want %v", c.arg, got, c.want)
		}
	}
}

// TestConfigBufferCompressionAuto: the buffer stores columns when batches
// go as columns (the default) and s2 under another codec; an explicit
// choice stands.
func TestConfigBufferCompressionAuto(t *testing.T) {
	for _, c := range []struct {
		args []string
		want buffer.BlockCompression
	}{
		{nil, buffer.CompressColumns},
		{[]string{"--compression", "zstd"}, buffer.CompressS2},
		{[]string{"--compression", "zstd", "--buffer-compression", "columns"}, buffer.CompressColumns},
		{[]string{"--buffer-compression", "none"}, buffer.CompressNone},
	} {
		cfg, err := loadConfig(append([]string{"--device-id", "d"}, c.args...), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.agent.Buffer.BlockCompression; got != c.want {
			t.Errorf("%v: buffer compression %q, want %q", c.args, got, c.want)
		}
	}
}
