package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRulesConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "hubd.yaml")
		if err := os.WriteFile(p, []byte("data-dir: "+dir+"\naggregate:\n  enabled: true\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := loadConfig([]string{"--config", write(`
rules:
  - name: hot
    metric: temp
    window: tumbling:10s
    agg: avg          # any aggregate the engine serves
    op: ">"
    value: 80
    group_by: [device]
`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.hub.Rules) != 1 || cfg.hub.Rules[0].Name != "hot" || cfg.hub.Rules[0].Value != 80 {
		t.Fatalf("rules %+v", cfg.hub.Rules)
	}
	_, err = loadConfig([]string{"--config", write("rules:\n  - {name: hot, metric: temp, window: tumbling:10s, agg: avg, op: \"=>\", value: 80}\n")})
	if err == nil || !strings.Contains(err.Error(), `rule "hot": key op`) {
		t.Fatalf("bad rule: %v", err)
	}
}
