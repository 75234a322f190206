package main

import (
	"strings"
	"testing"

	"edgeflow/hub"
)

// TestSinkMaxLagKey: sink-max-lag defaults to hub.DefaultSinkMaxLag, takes
// a positive number, and refuses 0 (it is not "unbounded") naming the key.
func TestSinkMaxLagKey(t *testing.T) {
	c, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.hub.SinkMaxLag != hub.DefaultSinkMaxLag {
		t.Errorf("default sink-max-lag %d, want %d", c.hub.SinkMaxLag, hub.DefaultSinkMaxLag)
	}
	if c, err = loadConfig([]string{"--sink-max-lag", "5000"}); err != nil || c.hub.SinkMaxLag != 5000 {
		t.Errorf("--sink-max-lag 5000: %d, %v", c.hub.SinkMaxLag, err)
	}
	for _, bad := range []string{"0", "-3", "many"} {
		if _, err := loadConfig([]string{"--sink-max-lag=" + bad}); err == nil || !strings.Contains(err.Error(), "sink-max-lag") {
			t.Errorf("--sink-max-lag %s: %v, want an error naming the key", bad, err)
		}
	}
}
