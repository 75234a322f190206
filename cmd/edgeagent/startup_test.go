package main

import (
	"edgeflow/internal/testproc"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentArgs are the arguments of an agent that needs nothing outside the
// test: loopback ports picked by the kernel, no NTP, no time requests.
func agentArgs(data string, extra ...string) []string {
	return append([]string{"--device-id", "dev-1", "--data-dir", data, "--listen", "127.0.0.1:0", "--udp-listen", "off",
		"--mqtt-url", "tcp://127.0.0.1:1", "--ntp-servers", "", "--time-hub=false", "--log-level", "warn"}, extra...)
}

// TestBinaryRefusesUnitlessDurations: a duration without a unit is an
// error naming the key, from a flag, the environment and the file (it
// used to be taken as nanoseconds: a 5 ns batch linger); so is a list
// where one value belongs.
func TestBinaryRefusesUnitlessDurations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs edgeagent")
	}
	bin := buildBinary(t, "edgeflow/cmd/edgeagent", "amd64")
	cases := []struct {
		name, yaml string
		env, args  []string
		want       string
	}{
		{name: "flag", args: []string{"--batch-linger", "5"}, want: `config key "batch-linger": 5 has no unit; write a duration such as 5s or 5m`},
		{name: "env", env: []string{"EDGEAGENT_BATCH_LINGER=5"}, want: `config key "batch-linger": 5 has no unit`},
		{name: "yaml", yaml: "drain-timeout: 5\n", want: `config key "drain-timeout": 5 has no unit`},
		{name: "linger floor", args: []string{"--batch-linger", "5ns"}, want: `config key "batch-linger"`},
		{name: "max age floor", args: []string{"--buffer-max-age", "5ms"}, want: `config key "buffer-max-age"`},
		{name: "data-dir list", yaml: "data-dir: [1, 2]\n", want: `config key "data-dir": a list ([1 2]), where a string is expected`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			args := agentArgs(data, c.args...)
			if c.yaml != "" {
				file := filepath.Join(dir, "edgeagent.yaml")
				if err := os.WriteFile(file, []byte(c.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", file)
				if strings.Contains(c.yaml, "data-dir:") {
					args = slicesWithout(args, "--data-dir", data)
				}
			}
			code, out := testproc.RunToExit(t, bin, args, c.env, 20*time.Second)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, want non-zero with %q; output:\n%s", code, c.want, out)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data dir: %v; a refused configuration opened the buffer", err)
			}
		})
	}
}

// slicesWithout returns args without the flag and value pair.
func slicesWithout(args []string, flag, value string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag && i+1 < len(args) && args[i+1] == value {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
