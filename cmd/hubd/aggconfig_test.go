package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgeflow/aggregate"
)

// TestDownsampleConfig reads the downsample tiers and the retention from
// YAML and the environment.
func TestDownsampleConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hubd.yaml")
	yaml := "aggregate:\n  downsample:\n    - {after: 168h, resolution: 5m}\n    - {after: 720h, resolution: 1h}\n  partials_retention: 8760h\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file})
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.hub.Aggregate
	want := []aggregate.DownsampleTier{{After: 168 * time.Hour, Resolution: 5 * time.Minute}, {After: 720 * time.Hour, Resolution: time.Hour}}
	if a == nil || len(a.Downsample) != 2 || a.Downsample[0] != want[0] || a.Downsample[1] != want[1] || a.PartialsRetention != 8760*time.Hour {
		t.Fatalf("aggregate config: %+v", a)
	}
	t.Setenv("HUBD_AGGREGATE_PARTIALS_RETENTION", "9000h")
	if cfg, err = loadConfig([]string{"--config", file}); err != nil || cfg.hub.Aggregate.PartialsRetention != 9000*time.Hour {
		t.Fatalf("retention from the environment: %v %+v", err, cfg)
	}
}

// TestBadDownsampleConfigNamesKey: bad tiers fail the start naming the key.
func TestBadDownsampleConfigNamesKey(t *testing.T) {
	tests := []struct{ yaml, key string }{
		{"aggregate:\n  downsample:\n    - {after: 24h, resolution: 5m}\n", "aggregate.downsample[0].after"},
		{"aggregate:\n  downsample:\n    - {after: 168h, resolution: 15s}\n", "aggregate.downsample[0].resolution"},
		{"aggregate:\n  downsample:\n    - {after: 168h, resolution: 5m}\n    - {after: 100h, resolution: 1h}\n", "aggregate.downsample[1].after"},
		{"aggregate:\n  downsample:\n    - {after: 168h, res: 5m}\n", "aggregate.downsample[0].res"},
		{"aggregate:\n  downsample: weekly\n", "aggregate.downsample"},
		{"aggregate:\n  downsample:\n    - {after: 168h, resolution: 5m}\n  partials_retention: 100h\n", "aggregate.partials_retention"},
		{"aggregate:\n  partials_retention: forever\n", "aggregate.partials_retention"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "hubd.yaml")
			_ = os.WriteFile(file, []byte(tt.yaml), 0o600)
			var stderr bytes.Buffer
			if code := run([]string{"--config", file, "--data-dir", t.TempDir(), "--http-addr", "off"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `"`+tt.key) {
				t.Fatalf("exit %d, stderr %q: want 2 naming %q", code, stderr.String(), tt.key)
			}
		})
	}
}
