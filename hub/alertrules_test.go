package hub

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// descRecorder is a Registerer that keeps the names of every metric its
// collectors describe, including vectors that have no series yet.
type descRecorder struct {
	mu    sync.Mutex
	names map[string]bool
}

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return true }

// TestAlertRulesUseHubMetrics keeps deploy/prometheus/edgeflow-rules.yml
// in step with the metrics: every edgeflow_hub_* and edgeflow_aggregate_*
// name in it must be one the hub (with its engine) registers.
func TestAlertRulesUseHubMetrics(t *testing.T) {
	rec := &descRecorder{names: map[string]bool{}}
	o := aggTestOptions(t, t.TempDir())
	o.Registerer = rec
	if _, err := New(o); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("../deploy/prometheus/edgeflow-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`edgeflow_(?:hub|aggregate)_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) < 10 {
		t.Fatalf("only %d hub metric names found in the rules", len(used))
	}
	for _, name := range used {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && rec.names[b] {
				base = b
			}
		}
		if !rec.names[base] {
			t.Errorf("the rules use %s, which the hub does not export", name)
		}
	}
}
