package main

import (
	"edgeflow/internal/testproc"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBinaryRefusesUnitlessDurations runs fleetsim with durations written
// without a unit, from a flag, the environment and the scenario file (at
// the top and nested): each is an error naming the key, where the run
// length used to be taken as 5 nanoseconds.
func TestBinaryRefusesUnitlessDurations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fleetsim")
	}
	dir := t.TempDir()
	bin := testproc.Build(t, ".", "fleetsim")
	scenario := filepath.Join(dir, "s.yaml")
	writeFile(t, scenario, "devices: 1\nduration: 30\nclasses:\n  - name: a\n    link:\n      latency: 20\n")
	cases := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"flag", []string{"--duration", "5"}, nil, []string{`scenario key "duration": 5 has no unit; write a duration such as 5s or 5m`}},
		{"env", nil, []string{"FLEETSIM_DURATION=5"}, []string{`scenario key "duration": 5 has no unit`}},
		{"file", []string{"--scenario", scenario}, nil, []string{`scenario key "duration": 30 has no unit`,
			`scenario key "classes[0].link.latency": 20 has no unit`}},
		{"probe", []string{"--probe-every", "5"}, nil, []string{`flag --probe-every: 5 has no unit`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--devices", "1", "--mqtt-url", "tcp://127.0.0.1:1", "--hub", "", "--data-dir", t.TempDir()}, c.args...)
			code, out := testproc.RunToExit(t, bin, args, c.env, 20*time.Second)
			if code != 2 {
				t.Errorf("exit %d, want 2; output:\n%s", code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
