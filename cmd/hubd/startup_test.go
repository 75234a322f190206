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

// TestBinaryRefusesBadDurationsAndTypes runs hubd with settings it must
// refuse before it opens anything: durations without a unit (from the
// file, the environment and a flag), a retention shorter than the
// checkpoint interval, a window that is not a multiple of the
// resolution, a list for data-dir and a queue length of 0. Each exits 2
// with a message naming the key, and the data directory is untouched.
func TestBinaryRefusesBadDurationsAndTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs hubd")
	}
	bin := testproc.Build(t, ".", "hubd")
	cases := []struct {
		name, yaml string
		env, args  []string
		want       []string
	}{
		{name: "yaml", yaml: "checkpoint-interval: 5\nretention-max-age: 168\nretention-interval: 2\n",
			want: []string{`config key "checkpoint-interval": 5 has no unit; write a duration such as 5s or 5m`,
				`config key "retention-max-age": 168 has no unit`, `config key "retention-interval": 2 has no unit`}},
		{name: "yaml string", yaml: "checkpoint-interval: \"5\"\n", want: []string{`config key "checkpoint-interval": 5 has no unit`}},
		{name: "env", env: []string{"HUBD_CHECKPOINT_INTERVAL=5"}, want: []string{`config key "checkpoint-interval": 5 has no unit`}},
		{name: "flag", args: []string{"--checkpoint-interval", "5"}, want: []string{`config key "checkpoint-interval": 5 has no unit`}},
		{name: "aggregate", yaml: "aggregate:\n  idle_timeout: 30\n", want: []string{`config key "aggregate.idle_timeout": 30 has no unit`}},
		{name: "window size", yaml: "aggregate:\n  windows:\n    - {name: w, kind: tumbling, size: 60}\n",
			want: []string{`config key "aggregate.windows[0].size": 60 has no unit`}},
		{name: "retention below checkpoint", args: []string{"--checkpoint-interval", "10m", "--retention-max-age", "5m"},
			want: []string{`config key "retention-max-age": 5m0s is shorter than checkpoint-interval 10m0s`}},
		{name: "checkpoint floor", env: []string{"HUBD_CHECKPOINT_INTERVAL=5ns"},
			want: []string{`config key "checkpoint-interval": 5ns is below the minimum 100ms`}},
		{name: "window not multiple", yaml: "aggregate:\n  resolution: 5s\n  windows:\n    - {name: w, kind: tumbling, size: 7s}\n",
			want: []string{`config key "aggregate.windows[0].size": 7s is not a positive multiple of the resolution 5s`}},
		{name: "data-dir list", yaml: "data-dir: [1, 2]\n", want: []string{`config key "data-dir": a list ([1 2]), where a string is expected`}},
		{name: "client queue 0", yaml: "mqtt-client-queue: 0\n", want: []string{`config key "mqtt-client-queue": 0 is not a queue length`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			args := append([]string{"--http-addr", "127.0.0.1:0", "--mqtt-listen", "127.0.0.1:0", "--log-level", "warn"}, c.args...)
			if c.yaml != "" {
				file := filepath.Join(dir, "hubd.yaml")
				yaml := c.yaml
				if !strings.Contains(yaml, "data-dir:") {
					yaml += "data-dir: " + data + "\n"
				}
				if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", file)
			} else {
				args = append(args, "--data-dir", data)
			}
			code, out := testproc.RunToExit(t, bin, args, c.env, 20*time.Second)
			if code != 2 {
				t.Errorf("exit %d, want 2; output:\n%s", code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data dir: %v; a refused configuration opened the store", err)
			}
		})
	}
}
