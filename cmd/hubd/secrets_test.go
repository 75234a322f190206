package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSecretInConfigErrors feeds hubd configurations that are wrong and
// carry a secret (a password in the broker URL's userinfo, a password or a
// token in a flag, the environment or the config file) and checks that
// hubd refuses them without printing the secret.
func TestNoSecretInConfigErrors(t *testing.T) {
	const secret = "Sup3rSecretPw"
	dir := t.TempDir()
	yaml := filepath.Join(dir, "hubd.yaml")
	if err := os.WriteFile(yaml, []byte("mqtt-password: "+secret+"\nhttp-read-token: "+secret+"\nbogus-key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"url with a bad scheme", []string{"--data-dir", data, "--mqtt-url", "http://hub:" + secret + "@broker:1883"}, nil},
		{"unparsable url", []string{"--data-dir", data, "--mqtt-url", "tcp://hub:" + secret + "@bro ker:1883/%zz"}, nil},
		{"url without a scheme", []string{"--data-dir", data, "--mqtt-url", "hub:" + secret + "@broker:1883"}, nil},
		{"url without a host", []string{"--data-dir", data, "--mqtt-url", "tcp://hub:" + secret + "@"}, nil},
		{"password and password file", []string{"--data-dir", data, "--mqtt-url", "tcp://broker:1883", "--mqtt-password", secret,
			"--mqtt-password-file", filepath.Join(dir, "nope")}, nil},
		{"token and a bad duration", []string{"--data-dir", data, "--http-read-token", secret, "--checkpoint-interval", "soon"}, nil},
		{"token in the environment", []string{"--data-dir", data, "--tick-interval", "-1s"}, map[string]string{"HUBD_HTTP_READ_TOKEN": secret}},
		{"secrets in a config file with an unknown key", []string{"--config", yaml}, nil},
		{"password with the embedded broker's options", []string{"--data-dir", data, "--mqtt-url", "tcp://u:" + secret + "@broker:1883",
			"--mqtt-auth-file", "/x"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			// What run does before it starts anything: load, then validate.
			cfg, err := loadConfig(c.args)
			if err == nil {
				o := cfg.hub
				o.EnsureDefaults()
				err = explainOptionsError(o.Validate())
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
