package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"edgeflow/hub/broker"
)

func TestPasswd(t *testing.T) {
	file := filepath.Join(t.TempDir(), "passwd")
	var out, errb bytes.Buffer
	for _, c := range []struct{ dev, pw string }{{"dev-a", "first"}, {"dev-b", "second"}, {"dev-a", "third"}} {
		if code := runPasswd([]string{"--file", file, "--cost", "4", c.dev}, strings.NewReader(c.pw+"\n"), &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	}
	creds, err := broker.LoadCredentials(file)
	if err != nil {
		t.Fatal(err)
	}
	if creds.Len() != 2 || !creds.Verify("dev-a", []byte("third")) || creds.Verify("dev-a", []byte("first")) || !creds.Verify("dev-b", []byte("second")) {
		t.Fatal("credentials file does not hold the last password of each device")
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode())
	}
	out.Reset()
	if code := runPasswd([]string{"--cost", "4", "dev-c"}, strings.NewReader("pw"), &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "dev-c:$2a$04$") {
		t.Fatalf("exit %d, printed %q", code, out.String())
	}
	if strings.Contains(out.String()+errb.String(), "third") {
		t.Fatal("a password was printed")
	}
	if code := runPasswd([]string{"bad/id"}, strings.NewReader("pw"), &out, &errb); code != 2 {
		t.Fatalf("bad device id: exit %d", code)
	}
}

func TestSecurityConfig(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	_ = os.WriteFile(tokenFile, []byte("a-token-from-a-file-123\n"), 0o600)
	cfg, err := loadConfig([]string{"--http-read-token-file", tokenFile, "--mqtt-allow-anonymous=false",
		"--mqtt-auth-file", "/x", "--max-events-per-second", "500"})
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.hub
	if o.HTTPReadToken != "a-token-from-a-file-123" || !o.MQTTDenyAnonymous || o.MaxEventsPerSecond != 500 || o.MQTTMaxConnsPerDevice != 4 {
		t.Fatalf("got token %v deny %v rate %v conns %v", o.HTTPReadToken != "", o.MQTTDenyAnonymous, o.MaxEventsPerSecond, o.MQTTMaxConnsPerDevice)
	}
	if o.MQTTMaxRetainedBytes != broker.DefaultMaxRetainedBytes || o.MQTTAuthThrottle.ClientFailures != 3 || o.MQTTAuthThrottle.SourceFailures != 20 {
		t.Fatalf("got retained bytes %d, auth failures per client %d, per source %d", o.MQTTMaxRetainedBytes,
			o.MQTTAuthThrottle.ClientFailures, o.MQTTAuthThrottle.SourceFailures)
	}
	for _, c := range []struct {
		args []string
		key  string
	}{
		{[]string{"--mqtt-allow-anonymous=false"}, "mqtt-allow-anonymous"},
		{[]string{"--mqtt-tls-cert", "c.pem"}, "mqtt-tls-cert"},
		{[]string{"--mqtt-tls-client-ca", "ca.pem"}, "mqtt-tls-client-ca"},
		{[]string{"--http-read-token", "xyzzy"}, "http-read-token"},
		{[]string{"--max-events-per-second", "-1"}, "max-events-per-second"},
		{[]string{"--mqtt-auth-file", filepath.Join(dir, "missing")}, "mqtt-auth-file"},
		{[]string{"--mqtt-max-retained-bytes", "0"}, "mqtt-max-retained-bytes"},
		{[]string{"--mqtt-max-retained-bytes", "2000000"}, "mqtt-max-retained-bytes"},
		{[]string{"--mqtt-auth-client-failures", "0"}, "mqtt-auth-client-failures"},
		{[]string{"--mqtt-auth-source-failures", "2000000"}, "mqtt-auth-source-failures"},
		{[]string{"--max-streams-per-device", "0"}, "max-streams-per-device"},
		{[]string{"--max-streams-per-device", "65537"}, "max-streams-per-device"},
		{[]string{"--stream-idle-expiry", "59m"}, "stream-idle-expiry"},
		{[]string{"--stream-idle-expiry", "168"}, "stream-idle-expiry"},
	} {
		t.Run(c.key, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--mqtt-listen", "127.0.0.1:0"}, c.args...)
			if code := run(args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `"`+c.key+`"`) {
				t.Fatalf("exit %d, stderr %q: want 2 naming %q", code, stderr.String(), c.key)
			}
			if strings.Contains(stderr.String(), "xyzzy") && c.key == "http-read-token" {
				t.Fatal("the token is in the error")
			}
		})
	}
}
