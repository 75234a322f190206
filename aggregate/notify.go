package aggregate

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// UpdateKind says what an Update announces.
type UpdateKind uint8

// Update kinds.
const (
	// UpdateWatermark: the hub watermark advanced to Watermark.
	UpdateWatermark UpdateKind = iota + 1
	// UpdateFinal: configured window Window [Start, End) became final for
	// every metric and group.
	UpdateFinal
	// UpdateRevised: late data changed Metric's window [Start, End) of
	// configured window Window after it was final (for sessions, the
	// session covering [Start, End); with no configured windows, the base
	// bucket, Window ""). Query it again for the new revision.
	UpdateRevised
	// UpdateStream: the merged stream has events up to NextOffset-1.
	UpdateStream
	// UpdateAttributes: Device's attribute table got the version Attrs,
	// in force from Start (the table's change stream; see ReviseDevice).
	UpdateAttributes
)

// String names the kind as the SSE endpoint may use it.
func (k UpdateKind) String() string {
	switch k {
	case UpdateWatermark:
		return "watermark"
	case UpdateFinal:
		return "final"
	case UpdateRevised:
		return "revised"
	case UpdateStream:
		return "stream"
	case UpdateAttributes:
		return "attributes"
	}
	return fmt.Sprintf("update(%d)", k)
}

// Update is one notification to subscribers.
type Update struct {
	Kind       UpdateKind
	Window     string
	Metric     string
	Start, End time.Time
	Watermark  time.Time
	NextOffset uint64
	// Device and Attrs: an UpdateAttributes' device and version (shared:
	// do not modify).
	Device string
	Attrs  map[string]string
}

// maxRevisedPerApply bounds the revision updates one Apply announces.
const maxRevisedPerApply = 4096

// maxFinalPerAdvance bounds the final updates one watermark move announces
// per window; beyond it the window's cursor jumps (the watermark update
// still tells subscribers how far everything is final).
const maxFinalPerAdvance = 1024

// configured is a configured window and the end of its next window to
// announce as final.
type configured struct {
	name string
	spec WindowSpec
	next int64
}

func configuredWindows(opt Options) []configured {
	out := make([]configured, 0, len(opt.Windows))
	for _, w := range opt.Windows {
		spec, _ := w.Spec() // validated
		out = append(out, configured{name: w.Name, spec: spec.normalize(opt.Resolution)})
	}
	return out
}

// touch is a (metric, bucket) that received late data in this Apply.
type touch struct {
	metric uint32
	bucket int64
}

// notifier collects the updates of one Apply or Tick.
type notifier struct {
	touched []touch
	out     []Update
}

func (n *notifier) revised(metric uint32, bk int64) {
	t := touch{metric, bk}
	if k := len(n.touched); k > 0 && n.touched[k-1] == t {
		return
	}
	n.touched = append(n.touched, t)
}

// watermark announces the new hub watermark and the configured windows it
// made final. The first watermark only positions the cursors.
func (n *notifier) watermark(e *Engine, first bool) {
	wm := e.clk.final
	n.out = append(n.out, Update{Kind: UpdateWatermark, Watermark: ts(wm)})
	al := int64(e.opt.AllowedLateness)
	for i := range e.windows {
		w := &e.windows[i]
		if w.spec.Kind == Session {
			continue
		}
		size, slide := int64(w.spec.Size), int64(w.spec.Slide)
		if first {
			w.next = (floorDiv(wm-al-size, slide)+1)*slide + size
			continue
		}
		for k := 0; w.next+al <= wm; k++ {
			if k == maxFinalPerAdvance {
				w.next = (floorDiv(wm-al-size, slide)+1)*slide + size
				break
			}
			n.out = append(n.out, Update{Kind: UpdateFinal, Window: w.name, Start: ts(w.next - size), End: ts(w.next)})
			w.next += slide
		}
	}
}

// flushNotes turns this Apply's notes into updates and sends them.
func (e *Engine) flushNotes() {
	n := &e.notes
	n.revisedUpdates(e)
	if e.merged.moved {
		e.merged.moved = false
		n.out = append(n.out, Update{Kind: UpdateStream, NextOffset: e.merged.out.next})
	}
	if len(n.out) > 0 {
		e.subs.send(n.out)
	}
	n.out = n.out[:0]
	n.touched = n.touched[:0]
}

// revisedUpdates announces each configured window that late data touched.
func (n *notifier) revisedUpdates(e *Engine) {
	if len(n.touched) == 0 {
		return
	}
	slices.SortFunc(n.touched, func(a, b touch) int {
		return cmp.Or(cmp.Compare(a.metric, b.metric), cmp.Compare(a.bucket, b.bucket))
	})
	n.touched = slices.Compact(n.touched)
	var ups []Update
	for _, t := range n.touched {
		ups = n.revisedFor(e, t, ups)
		if len(ups) >= maxRevisedPerApply {
			break
		}
	}
	slices.SortFunc(ups, func(a, b Update) int {
		return cmp.Or(cmp.Compare(a.Window, b.Window), cmp.Compare(a.Metric, b.Metric), a.Start.Compare(b.Start))
	})
	n.out = append(n.out, slices.CompactFunc(ups, func(a, b Update) bool {
		return a.Window == b.Window && a.Metric == b.Metric && a.Start.Equal(b.Start)
	})...)
}

// revisedFor appends the windows containing one touched bucket.
func (n *notifier) revisedFor(e *Engine, t touch, ups []Update) []Update {
	metric := e.series.metrics[t.metric].name
	start := t.bucket * e.res
	if len(e.windows) == 0 {
		return append(ups, Update{Kind: UpdateRevised, Metric: metric, Start: ts(start), End: ts(start + e.res)})
	}
	for _, w := range e.windows {
		if w.spec.Kind == Session {
			ups = append(ups, Update{Kind: UpdateRevised, Window: w.name, Metric: metric, Start: ts(start), End: ts(start + e.res)})
			continue
		}
		size, slide := int64(w.spec.Size), int64(w.spec.Slide)
		for s := floorDiv(start, slide) * slide; s > start-size; s -= slide {
			ups = append(ups, Update{Kind: UpdateRevised, Window: w.name, Metric: metric, Start: ts(s), End: ts(s + size)})
		}
	}
	return ups
}

// subscribers are the live subscriptions. Sends never block: a
// subscriber whose buffer is full is dropped with ErrSlowSubscriber.
type subscribers struct {
	mu      sync.Mutex
	list    []*Subscription
	dropped uint64
}

// Subscription receives updates until it is closed or dropped.
type Subscription struct {
	c      chan Update
	owner  *subscribers
	err    error
	closed bool
}

// Subscribe returns a subscription with a buffer of buffer updates
// (minimum 1). The engine never waits for a subscriber: when its buffer is
// full the subscription is dropped, its channel closed and Err says why.
func (e *Engine) Subscribe(buffer int) *Subscription {
	s := &Subscription{c: make(chan Update, max(buffer, 1)), owner: &e.subs}
	e.subs.mu.Lock()
	e.subs.list = append(e.subs.list, s)
	e.subs.mu.Unlock()
	return s
}

// Updates is the subscription's channel; it is closed when the
// subscription is closed or dropped.
func (s *Subscription) Updates() <-chan Update { return s.c }

// Err returns why the subscription ended (ErrSlowSubscriber when it was
// dropped), or nil.
func (s *Subscription) Err() error {
	s.owner.mu.Lock()
	defer s.owner.mu.Unlock()
	return s.err
}

// Close ends the subscription; it is safe to call more than once.
func (s *Subscription) Close() {
	s.owner.mu.Lock()
	defer s.owner.mu.Unlock()
	s.owner.remove(s, nil)
}

// remove closes s's channel and unlinks it; the caller holds mu.
func (ss *subscribers) remove(s *Subscription, reason error) {
	if s.closed {
		return
	}
	s.closed, s.err = true, reason
	close(s.c)
	ss.list = slices.DeleteFunc(ss.list, func(x *Subscription) bool { return x == s })
}

func (ss *subscribers) send(ups []Update) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range slices.Clone(ss.list) {
		for _, u := range ups {
			select {
			case s.c <- u:
				continue
			default:
			}
			ss.dropped++
			ss.remove(s, fmt.Errorf("%w: buffer of %d updates full", ErrSlowSubscriber, cap(s.c)))
			break
		}
	}
}
