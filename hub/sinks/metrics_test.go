package sinks_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/hub/sinks"
)

// nameRecorder is a Registerer that keeps the names its collectors
// describe (vectors without series included).
type nameRecorder map[string]bool

func (r nameRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			r[m[1]] = true
		}
	}
	return nil
}

func (r nameRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r nameRecorder) Unregister(prometheus.Collector) bool { return true }

// TestAlertRulesUseSinkMetrics keeps deploy/prometheus/edgeflow-rules.yml
// in step with the sinks' metrics: every edgeflow_sink_* name in it must
// be one NewMetrics registers.
func TestAlertRulesUseSinkMetrics(t *testing.T) {
	names := nameRecorder{}
	if _, err := sinks.NewMetrics(names); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("../../deploy/prometheus/edgeflow-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`edgeflow_sink_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) < 4 {
		t.Fatalf("only %d sink metric names in the rules", len(used))
	}
	for _, n := range used {
		if !names[n] {
			t.Errorf("the rules use %s, which the sinks do not export (they export %v)", n, names)
		}
	}
}
