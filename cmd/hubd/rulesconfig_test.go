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

// TestAlertOutputsConfig: alert_outputs parse from the file; a bad output
// is an error naming it and the key; outputs need rules.
func TestAlertOutputsConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "hubd.yaml")
		if err := os.WriteFile(p, []byte("data-dir: "+dir+"\naggregate:\n  enabled: true\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const rule = "rules: [{name: hot, metric: temp, window: tumbling:10s, agg: avg, op: \">\", value: 80}]\n"
	cfg, err := loadConfig([]string{"--config", write(rule + `
alert_outputs:
  - name: ops
    kind: webhook
    url: https://alerts.example.com/hook
    headers: {Authorization: "Bearer x"}
    timeout: 3s
  - {name: bus, kind: mqtt, topic: edgeflow/alerts}
`)})
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.hub.AlertOutputs
	if len(o) != 2 || o[0].URL != "https://alerts.example.com/hook" || o[0].Headers["authorization"] != "Bearer x" && o[0].Headers["Authorization"] != "Bearer x" ||
		o[0].Timeout.String() != "3s" || o[1].Topic != "edgeflow/alerts" {
		t.Fatalf("outputs %+v", o)
	}
	for body, want := range map[string]string{
		rule + "alert_outputs: [{name: bus, kind: mqtt, topic: \"a/#\"}]\n":                `alert output "bus": key "topic"`,
		rule + "alert_outputs: [{name: ops, kind: webhook, url: \"https://x\", tls: 1}]\n": `alert_outputs[0] "ops": key "tls"`,
		"alert_outputs: [{name: bus, kind: mqtt, topic: edgeflow/alerts}]\n":               `alert outputs need rules`,
	} {
		if _, err := loadConfig([]string{"--config", write(body)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %s", body, err, want)
		}
	}
}
