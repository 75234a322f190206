package hub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"edgeflow/hub/alertout"
	"edgeflow/hub/hublog"
	"edgeflow/hub/rules"
	"edgeflow/internal/lograte"
)

// BenchmarkAlertOutput measures the alert-change log in a real store: the
// applier's cost of logging changes (append, in batches of 100 as one
// input's changes), and a webhook output delivering them one POST each to
// a local receiver, with a position commit per change.
func BenchmarkAlertOutput(b *testing.B) {
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := hublog.OpenStore(b.TempDir(), false, lg)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer srv.Close()
	l := &alertLog{st: st, log: lg, rate: rateLog{lim: lograte.Limiter{Every: time.Minute}, now: time.Now},
		first: 1, positions: map[string]uint64{"ops": 0}}
	n := b.N
	start := time.Now()
	batch := make([]rules.Alert, 0, 100)
	for seq := 1; seq <= n; seq++ {
		batch = append(batch, rules.Alert{ID: fmt.Sprintf("hot/device=d%d/1700000000000000000", seq), Rule: "hot", Group: fmt.Sprintf("device=d%d", seq),
			Start: time.Unix(1700000000, 0).UTC(), Value: 81.5, State: rules.Firing, Revision: 1, FiredAt: time.Unix(1700000060, 0).UTC(), Seq: uint64(seq)})
		if len(batch) == cap(batch) || seq == n {
			l.append(batch)
			batch = batch[:0]
		}
	}
	logged := time.Since(start)
	o, err := alertout.New(alertout.Config{Name: "ops", Kind: alertout.KindWebhook, URL: srv.URL}, l, nil, nil, lg, 0)
	if err != nil {
		b.Fatal(err)
	}
	l.outputs = []*alertout.Output{o}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start = time.Now()
	go func() { defer close(done); o.Run(ctx) }()
	for o.Position() < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	delivered := time.Since(start)
	cancel()
	<-done
	if first, _ := l.Bounds(); first != 0 {
		b.Fatalf("log not pruned: starts at %d", first)
	}
	b.ReportMetric(float64(n)/logged.Seconds(), "logged/s")
	b.ReportMetric(float64(n)/delivered.Seconds(), "delivered/s")
}
