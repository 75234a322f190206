package alertout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"edgeflow/internal/retry"
)

// Change is one alert revision of the alert-change log: Seq is the rules
// evaluator's change sequence, JSON the alert as GET /v1/alerts lists it.
type Change struct {
	Seq  uint64
	JSON []byte
}

// Log is the hub's alert-change log and the outputs' stored positions.
type Log interface {
	// ChangesAfter returns up to limit changes with Seq > seq, in order.
	ChangesAfter(seq uint64, limit int) ([]Change, error)
	// Commit stores the output's position: it delivered every change up
	// to pos (the log may then drop changes every output delivered).
	Commit(name string, pos uint64) error
	// Bounds are the first and last Seq the log holds (0, 0 when empty).
	Bounds() (first, last uint64)
}

// Publisher publishes one message at QoS 1, not retained, and returns
// once the broker took it (hub.Server.Publish).
type Publisher func(topic string, payload []byte) error

// Status is what GET /v1/alerts/outputs reports for an output.
type Status struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Position is the alert change sequence delivered (or skipped after a
	// permanent failure) up to, as stored in the hub's store.
	Position uint64 `json:"position"`
	// Pending counts the changes after Position the log holds.
	Pending uint64 `json:"pending"`
	// Delivered, Failed and Retries count, since the hub started, changes
	// the receiver took, changes refused for good (a webhook's 4xx other
	// than 408 and 429: logged and skipped) and attempts that will be
	// retried.
	Delivered uint64 `json:"delivered"`
	Failed    uint64 `json:"failed"`
	Retries   uint64 `json:"retries"`
	// LastError is the last failed attempt or refused change and
	// LastErrorTime when it happened (a LastDelivery after it says the
	// receiver takes changes again).
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	// LastDelivery is when the receiver last took a change.
	LastDelivery time.Time `json:"last_delivery,omitzero"`
}

// batchChanges bounds the changes one read of the log returns.
const batchChanges = 64

// idlePoll is how often an idle output looks at the log without being
// notified (Notify wakes it at once).
const idlePoll = time.Second

// Output delivers the alert-change log to one receiver, in Seq order, at
// least once. Create it with New, Run it, and Notify it of new changes.
type Output struct {
	cfg    Config
	log    Log
	pub    Publisher
	client *http.Client
	m      *Metrics
	lg     *slog.Logger
	wake   chan struct{}
	pos    uint64 // owned by Run

	mu     sync.Mutex
	status Status
}

// New returns the output of cfg, starting after position pos (its stored
// position, 0 for a new one). pub is needed by mqtt outputs; m may be nil.
func New(cfg Config, l Log, pub Publisher, m *Metrics, lg *slog.Logger, pos uint64) (*Output, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Kind == KindMQTT && pub == nil {
		return nil, fmt.Errorf("%w: alert output %q: key \"kind\": mqtt needs the hub's broker", ErrInvalidConfig, cfg.Name)
	}
	if lg == nil {
		lg = slog.Default()
	}
	o := &Output{cfg: cfg, log: l, pub: pub, m: m, lg: lg.With("alert_output", cfg.Name),
		wake: make(chan struct{}, 1), pos: pos, client: &http.Client{Timeout: cfg.Timeout}}
	o.status = Status{Name: cfg.Name, Kind: cfg.Kind, Position: pos}
	o.m.position(cfg.Name, pos)
	return o, nil
}

// Name is the output's configured name.
func (o *Output) Name() string { return o.cfg.Name }

// Notify wakes the output: the log holds new changes.
func (o *Output) Notify() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Status returns the output's status.
func (o *Output) Status() Status {
	o.mu.Lock()
	st := o.status
	o.mu.Unlock()
	first, last := o.log.Bounds()
	if from := max(st.Position, first-min(first, 1)); last > from {
		st.Pending = last - from
	}
	return st
}

// Position is the position delivered up to.
func (o *Output) Position() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.status.Position
}

// Run delivers changes until ctx ends.
func (o *Output) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		o.m.pending(o.cfg.Name, o.Status().Pending)
		changes, err := o.log.ChangesAfter(o.pos, batchChanges)
		if err != nil {
			o.attemptFailed(err)
			retry.Sleep(ctx, backoff)
			backoff = min(backoff*2, o.cfg.MaxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(changes) == 0 {
			t := time.NewTimer(idlePoll)
			select {
			case <-ctx.Done():
			case <-o.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		for _, c := range changes {
			if !o.deliver(ctx, c) {
				return
			}
			o.pos = c.Seq
			if err := o.log.Commit(o.cfg.Name, c.Seq); err != nil {
				// The next start resends from the stored position: at
				// least once still holds.
				o.lg.Warn("storing the alert output's position failed", "position", c.Seq, "err", err)
			}
			o.m.position(o.cfg.Name, c.Seq)
			o.setStatus(func(st *Status) { st.Position = c.Seq })
		}
	}
}

// alertKey is the part of an alert's JSON the idempotency key needs.
type alertKey struct {
	ID       string `json:"id"`
	Revision uint64 `json:"revision"`
}

// deliver sends c until the receiver takes it or refuses it for good
// (true), or ctx ends (false).
func (o *Output) deliver(ctx context.Context, c Change) bool {
	var k alertKey
	if err := json.Unmarshal(c.JSON, &k); err != nil || k.ID == "" {
		o.permanent(c, fmt.Errorf("alert change %d is not an alert's JSON: %v", c.Seq, err))
		return true
	}
	backoff := 100 * time.Millisecond
	for {
		permanent, err := o.send(ctx, c, k)
		if err == nil {
			now := time.Now()
			o.m.delivered(o.cfg.Name)
			o.setStatus(func(st *Status) { st.Delivered++; st.LastDelivery = now })
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if permanent {
			o.permanent(c, fmt.Errorf("alert %s revision %d: %w", k.ID, k.Revision, err))
			return true
		}
		o.m.retried(o.cfg.Name)
		o.setStatus(func(st *Status) { st.Retries++ })
		o.attemptFailed(fmt.Errorf("alert %s revision %d: %w", k.ID, k.Revision, err))
		wait := backoff
		var ra *retryAfterError
		if errors.As(err, &ra) {
			wait = max(wait, ra.after)
		}
		retry.Sleep(ctx, wait)
		backoff = min(backoff*2, o.cfg.MaxBackoff)
	}
}

// maxRetryAfter bounds how long a webhook's Retry-After holds a delivery
// back: a receiver's mistake (a date far ahead) cannot stop the output.
const maxRetryAfter = 5 * time.Minute

// retryAfterError is a retryable answer that said when to ask again
// (Retry-After): the next attempt waits at least that long.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (Retry-After: %v)", e.err, e.after)
}

func (e *retryAfterError) Unwrap() error { return e.err }

// retryAfter reads a Retry-After header, seconds or an HTTP date (RFC
// 9110), bounded by maxRetryAfter; 0 when absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return min(time.Duration(n)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}

// permanent records a change skipped for good.
func (o *Output) permanent(c Change, err error) {
	o.lg.Error("alert change refused by the receiver; skipped", "seq", c.Seq, "err", err)
	o.m.failed(o.cfg.Name)
	now := time.Now()
	o.setStatus(func(st *Status) { st.Failed++; st.LastError, st.LastErrorTime = err.Error(), now })
}

// attemptFailed records a failure that will be retried.
func (o *Output) attemptFailed(err error) {
	o.lg.Debug("alert output attempt failed; retrying", "err", err)
	now := time.Now()
	o.setStatus(func(st *Status) { st.LastError, st.LastErrorTime = err.Error(), now })
}

// send makes one attempt; permanent says a retry cannot succeed.
func (o *Output) send(ctx context.Context, c Change, k alertKey) (permanent bool, err error) {
	if o.cfg.Kind == KindMQTT {
		return false, o.pub(o.cfg.Topic, c.JSON)
	}
	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.cfg.URL, bytes.NewReader(c.JSON))
	if err != nil {
		return true, err
	}
	for h, v := range o.cfg.Headers {
		req.Header.Set(h, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", k.ID+":"+strconv.FormatUint(k.Revision, 10))
	resp, err := o.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact(ue.URL) // the status and logs show no query token
		}
		return false, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return false, nil
	case code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
		return true, fmt.Errorf("webhook answered %s", resp.Status)
	default:
		err := fmt.Errorf("webhook answered %s", resp.Status)
		if d := retryAfter(resp.Header.Get("Retry-After"), time.Now()); d > 0 {
			return false, &retryAfterError{err: err, after: d}
		}
		return false, err
	}
}

func (o *Output) setStatus(fn func(*Status)) {
	o.mu.Lock()
	fn(&o.status)
	o.mu.Unlock()
}

// redact drops a URL's user information and query.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
