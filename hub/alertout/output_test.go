package alertout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// memLog is an in-memory Log for the output's unit tests.
type memLog struct {
	mu      sync.Mutex
	changes []Change
	commits map[string]uint64
}

func (l *memLog) ChangesAfter(seq uint64, limit int) ([]Change, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Change
	for _, c := range l.changes {
		if c.Seq > seq && len(out) < limit {
			out = append(out, c)
		}
	}
	return out, nil
}

func (l *memLog) Commit(name string, pos uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits[name] = pos
	return nil
}

func (l *memLog) Bounds() (uint64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.changes) == 0 {
		return 0, 0
	}
	return l.changes[0].Seq, l.changes[len(l.changes)-1].Seq
}

func (l *memLog) add(seq uint64, id string, rev uint64) {
	b, _ := json.Marshal(map[string]any{"id": id, "revision": rev, "state": "firing"})
	l.mu.Lock()
	l.changes = append(l.changes, Change{Seq: seq, JSON: b})
	l.mu.Unlock()
}

// TestWebhookDelivery: a webhook output delivers every change in order with
// its idempotency key and headers, retries 503 and 429 with backoff,
// skips (and counts) a change refused with 400, starts after its given
// position and commits each change's sequence.
func TestWebhookDelivery(t *testing.T) {
	var mu sync.Mutex
	var got []string
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var k alertKey
		_ = json.Unmarshal(body, &k)
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case r.Header.Get("Authorization") != "Bearer x" || r.Header.Get("Content-Type") != "application/json":
			w.WriteHeader(http.StatusUnauthorized)
		case r.Header.Get("Idempotency-Key") != fmt.Sprintf("%s:%d", k.ID, k.Revision):
			w.WriteHeader(http.StatusBadRequest)
		case calls <= 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case calls == 5:
			w.WriteHeader(http.StatusTooManyRequests)
		case k.ID == "refused":
			w.WriteHeader(http.StatusBadRequest)
		default:
			got = append(got, r.Header.Get("Idempotency-Key"))
		}
	}))
	defer srv.Close()
	l := &memLog{commits: map[string]uint64{}}
	l.add(3, "old", 1) // before the starting position: not sent
	l.add(4, "a", 1)
	l.add(5, "refused", 1)
	l.add(6, "a", 2)
	l.add(7, "b", 1)
	cfg := Config{Name: "ops", Kind: KindWebhook, URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer x"}, MaxBackoff: 20 * time.Millisecond}
	o, err := New(cfg, l, nil, nil, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); o.Position() < 7; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("position %d after 10s, status %+v", o.Position(), o.Status())
		}
	}
	l.add(8, "b", 2)
	o.Notify()
	for deadline := time.Now().Add(10 * time.Second); o.Position() < 8; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("position %d after 10s: not woken", o.Position())
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a:1", "a:2", "b:1", "b:2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	st := o.Status()
	if st.Delivered != 4 || st.Failed != 1 || st.Retries != 4 || st.Position != 8 || st.Pending != 0 || l.commits["ops"] != 8 ||
		st.LastError == "" || st.LastDelivery.IsZero() {
		t.Fatalf("status %+v, committed %d", st, l.commits["ops"])
	}
}

// TestMQTTRetriesUntilPublished: a publish the broker does not take is
// retried until it does; nothing is skipped.
func TestMQTTRetriesUntilPublished(t *testing.T) {
	var mu sync.Mutex
	var got []string
	fails := 3
	pub := func(topic string, payload []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return fmt.Errorf("broker not connected")
		}
		var k alertKey
		_ = json.Unmarshal(payload, &k)
		got = append(got, fmt.Sprintf("%s %s:%d", topic, k.ID, k.Revision))
		return nil
	}
	l := &memLog{commits: map[string]uint64{}}
	l.add(1, "a", 1)
	l.add(2, "a", 2)
	o, err := New(Config{Name: "bus", Kind: KindMQTT, Topic: "edgeflow/alerts", MaxBackoff: 10 * time.Millisecond}, l, pub, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); o.Position() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("position %d after 10s", o.Position())
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[edgeflow/alerts a:1 edgeflow/alerts a:2]" || o.Status().Retries != 3 || o.Status().Failed != 0 {
		t.Fatalf("published %v, status %+v", got, o.Status())
	}
}

// TestWebhookRetryAfter: a 503 or 429 with Retry-After holds the next
// attempt back at least that long (seconds, or an HTTP date), never
// beyond maxRetryAfter; an unreadable one leaves the backoff alone.
func TestWebhookRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":      0,
		"2":     2 * time.Second,
		"0":     0,
		"-1":    0,
		"soon":  0,
		"99999": maxRetryAfter,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
		now.Add(time.Hour).Format(http.TimeFormat):        maxRetryAfter,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}

	var mu sync.Mutex
	var at []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	l := &memLog{commits: map[string]uint64{}}
	l.add(1, "a", 1)
	o, err := New(Config{Name: "ops", Kind: KindWebhook, URL: srv.URL, Timeout: 5 * time.Second, MaxBackoff: 20 * time.Millisecond}, l, nil, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); o.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); o.Position() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("position %d after 10s, status %+v", o.Position(), o.Status())
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// A lower bound only: the output must not ask again before the
	// receiver said it may (a sleep never ends early).
	if len(at) != 2 || at[1].Sub(at[0]) < time.Second {
		t.Fatalf("attempts at %v: want the second at least 1s after the first (Retry-After: 1), not after max_backoff 20ms", at)
	}
	if st := o.Status(); !strings.Contains(st.LastError, "Retry-After: 1s") {
		t.Fatalf("last error %q does not say Retry-After", st.LastError)
	}
}
