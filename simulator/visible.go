package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// A visibility probe measures how long an event takes from its append on
// a device to being counted in the hub's aggregate, as a dashboard polling
// the hub would see it. Every ProbeEvery the prober asks for one probe;
// the next device to append a trusted event whose window the simulator can
// predict claims it and records what the hub must show: its base window's
// count for that device and metric once the event is in. The prober then
// polls GET /v1/aggregates for that one window until the count reaches it
// (or ProbeTimeout passes, counted as a timeout). Probes are sampled, one
// at a time, so they cost the hub a few small queries a second.
type probe struct {
	device, metric string
	bucket         int64 // base-resolution bucket of the event's true time
	count          uint64
	at             time.Time // append time
}

// prober runs the probes of one fleet.
type prober struct {
	f *Fleet
	// bases are the hubs' URLs; a probe asks bases[next], and a failed
	// query moves next on to the following hub.
	bases   []string
	next    atomic.Int32
	client  *http.Client
	want    atomic.Bool // a probe is wanted: the next eligible append claims it
	claimed chan probe
	every   time.Duration
	timeout time.Duration

	done, timedOut, failed atomic.Uint64
	lastErr                atomic.Pointer[string]
}

func newProber(f *Fleet, hubURLs []string, every, timeout time.Duration) *prober {
	var bases []string
	for _, h := range hubURLs {
		if h != "" {
			bases = append(bases, strings.TrimSuffix(h, "/"))
		}
	}
	return &prober{f: f, bases: bases, client: &http.Client{Timeout: 10 * time.Second},
		claimed: make(chan probe, 1), every: every, timeout: timeout}
}

// offer is called by a device's worker after an append: if a probe is
// wanted and the event's window is predictable, it claims the probe.
func (p *prober) offer(device, metric string, bucket int64, count uint64, at time.Time) {
	if p == nil || !p.want.Load() || !p.want.CompareAndSwap(true, false) {
		return
	}
	p.claimed <- probe{device, metric, bucket, count, at}
}

// run asks for a probe every p.every from the start of the steady state
// and measures each claimed one, until ctx ends.
func (p *prober) run(ctx context.Context, steadyFrom time.Time) {
	select {
	case <-time.After(time.Until(steadyFrom)):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.want.Store(true)
		select {
		case pr := <-p.claimed:
			p.measure(ctx, pr)
		case <-ctx.Done():
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// measure polls the probed window until it holds the probed event.
func (p *prober) measure(ctx context.Context, pr probe) {
	res := int64(p.f.sc.Resolution)
	q := url.Values{}
	q.Set("metric", pr.metric)
	q.Set("window", "tumbling:"+p.f.sc.Resolution.String())
	q.Set("from", time.Unix(0, pr.bucket*res).UTC().Format(time.RFC3339Nano))
	q.Set("to", time.Unix(0, (pr.bucket+1)*res).UTC().Format(time.RFC3339Nano))
	q.Set("group_by", "device")
	q.Set("device", pr.device)
	q.Set("aggs", "count")
	i := p.next.Load()
	u := p.bases[i] + "/v1/aggregates?" + q.Encode()
	deadline := pr.at.Add(p.timeout)
	for {
		n, err := p.count(ctx, u, pr.device)
		if err != nil {
			msg := p.bases[i] + ": " + err.Error()
			p.lastErr.Store(&msg)
			p.failed.Add(1)
			p.next.Store((i + 1) % int32(len(p.bases)))
			return
		}
		now := time.Now()
		if n >= pr.count {
			p.f.visible.Observe(now.Sub(pr.at), 1)
			p.done.Add(1)
			return
		}
		if now.After(deadline) {
			p.timedOut.Add(1)
			return
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// count is the device's count in the one window the query asks for.
func (p *prober) count(ctx context.Context, u, device string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("visibility probe: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	var hw hubWindows
	if err := json.Unmarshal(body, &hw); err != nil {
		return 0, fmt.Errorf("visibility probe: %w", err)
	}
	for _, w := range hw.Windows {
		if w.Group["device"] == device {
			return w.Count, nil
		}
	}
	return 0, nil
}

// Visibility is the probes' outcome in a Report.
type Visibility struct {
	Latency  Quantiles `json:"latency"`
	TimedOut uint64    `json:"timed_out"`
	Failed   uint64    `json:"failed"`
	LastErr  string    `json:"last_error,omitempty"`
}

func (p *prober) summary() *Visibility {
	if p == nil {
		return nil
	}
	v := &Visibility{Latency: p.f.visible.Summary(), TimedOut: p.timedOut.Load(), Failed: p.failed.Load()}
	if e := p.lastErr.Load(); e != nil {
		v.LastErr = *e
	}
	return v
}
