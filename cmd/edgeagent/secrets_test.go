package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSecretInConfigErrors feeds edgeagent configurations that are wrong
// and carry a secret (a password in a broker URL's userinfo, a password or
// a token in a flag, the environment or the config file) and checks that
// the error, as edgeagent prints it, does not hold the secret.
func TestNoSecretInConfigErrors(t *testing.T) {
	const secret = "Sup3rSecretPw"
	dir := t.TempDir()
	yaml := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(yaml, []byte("device-id: d\nmqtt-password: "+secret+"\nhttp-token: "+secret+"\nbogus-key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--device-id", "dev-1", "--data-dir", filepath.Join(dir, "data")}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"url with a bad scheme", []string{"--mqtt-url", "http://dev-1:" + secret + "@broker:1883"}, nil},
		{"url without a scheme", []string{"--mqtt-url", "dev-1:" + secret + "@broker:1883"}, nil},
		{"unparsable url", []string{"--mqtt-url", "tcp://dev-1:" + secret + "@bro ker:1883/%zz"}, nil},
		{"second url bad", []string{"--mqtt-url", "tcp://ok:1883,ftp://dev-1:" + secret + "@broker:21"}, nil},
		{"password and a bad size", []string{"--mqtt-password", secret, "--buffer-max-bytes", "lots"}, nil},
		{"token and a bad policy", []string{"--http-token", secret, "--buffer-full-policy", "explode"}, nil},
		{"password in the environment", []string{"--durability", "maybe"}, map[string]string{"EDGEAGENT_MQTT_PASSWORD": secret}},
		{"secrets in a config file with an unknown key", []string{"--config", yaml}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) string { return c.env[k] }
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			// What run does before it starts anything: load, then validate.
			cfg, err := loadConfig(append(append([]string{}, base...), c.args...), getenv)
			if err == nil {
				o := cfg.agent
				o.EnsureDefaults()
				if err = o.Validate(); err != nil {
					err = explain(err)
				}
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the secret is in the error: %v", err)
			}
			t.Log(err)
		})
	}
}

// TestBrokerURLCredentialsLifted checks that a password in a broker URL
// becomes the uplink's password and leaves the URL, which the agent logs.
func TestBrokerURLCredentialsLifted(t *testing.T) {
	const secret = "Sup3rSecretPw"
	cfg, err := loadConfig([]string{"--device-id", "dev-1", "--mqtt-url", "tcp://dev-1:" + secret + "@broker:1883,ssl://dev-1:" + secret + "@b2:8883"},
		func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.agent.Uplink
	if u.Username != "dev-1" || u.Password != secret || strings.Join(u.Brokers, ",") != "tcp://broker:1883,ssl://b2:8883" {
		t.Fatalf("user %q, password set %v, brokers %v", u.Username, u.Password == secret, u.Brokers)
	}
	_, err = loadConfig([]string{"--device-id", "dev-1", "--mqtt-password", "0therPw9", "--mqtt-url", "tcp://dev-1:" + secret + "@broker:1883"},
		func(string) string { return "" })
	if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "0therPw9") {
		t.Fatalf("conflicting credentials: %v", err)
	}
}
