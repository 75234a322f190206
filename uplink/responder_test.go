package uplink

import (
	"fmt"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// verdict is what the responder does with one arrival of a batch.
type verdict struct {
	drop   bool          // send no answer
	reject string        // non-empty: answer REJECTED with this reason
	dups   int           // extra copies of the answer
	delay  time.Duration // answer this much later
	// refused: answer OK naming these events refused, as a hub that
	// refuses events one by one does.
	refused []*wirepb.Gap
}

// responder stands in for the hub in tests: a paho client that subscribes
// to every device's batches, decodes them with wire.DecodeBatch, checks
// them and answers on the device's ack topic the way policy says. It is
// not the hub: it keeps everything in memory and never deduplicates
// beyond choosing OK or DUPLICATE.
type responder struct {
	t       testing.TB
	cli     mqtt.Client
	in      chan mqtt.Message
	policy  func(b *wirepb.Batch, arrival int) verdict
	reorder bool // swap the answers of consecutive batches
	light   bool // count only (benchmarks)
	ackQoS  byte // QoS of answers; default 1
	oldHub  bool // answer columnar frames as a hub older than the codec does
	stop    chan struct{}
	done    chan struct{}

	mu             sync.Mutex
	received       map[uint64]int // seq -> arrivals
	arrivals       map[[2]uint64]int
	answered       map[uint64]bool // seqs covered by an answer that was sent
	refusedColumns int             // columnar frames answered as an old hub (oldHub)
	order          []uint64        // first seq of each first arrival, in order
	events         int
	bytes          int
	errs           []string
	gaps           [][2]uint64                  // every gap a batch header reported
	methods        map[uint64]wirepb.TimeMethod // seq -> time method, as last received
	batchSizes     []int                        // events per batch, first arrivals, in order
	codecs         map[wire.Codec]int           // frames by codec
}

func newResponder(t testing.TB, url string, policy func(*wirepb.Batch, int) verdict) *responder {
	t.Helper()
	r := &responder{
		t: t, in: make(chan mqtt.Message, 1024), policy: policy, ackQoS: 1,
		stop: make(chan struct{}), done: make(chan struct{}),
		received: map[uint64]int{}, arrivals: map[[2]uint64]int{}, answered: map[uint64]bool{},
		methods: map[uint64]wirepb.TimeMethod{}, codecs: map[wire.Codec]int{},
	}
	subscribed := make(chan struct{}, 1)
	r.cli = dialTest(t, url, fmt.Sprintf("responder-%d", time.Now().UnixNano()), func(c mqtt.Client) {
		tok := c.Subscribe(wire.AllBatches, 1, func(_ mqtt.Client, m mqtt.Message) {
			select {
			case r.in <- m:
			case <-r.stop:
			}
		})
		if tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
			select {
			case subscribed <- struct{}{}:
			default:
			}
		}
	})
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("responder did not subscribe")
	}
	go r.run()
	t.Cleanup(r.close)
	return r
}

func (r *responder) close() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		r.t.Error(e)
	}
}

func (r *responder) run() {
	defer close(r.done)
	var held *heldAck
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
			if held != nil {
				r.send(held)
				held = nil
			}
		case m := <-r.in:
			a := r.handle(m)
			if a == nil {
				continue
			}
			if !r.reorder {
				r.send(a)
			} else if held == nil {
				held = a
			} else {
				r.send(a)
				r.send(held)
				held = nil
			}
		}
	}
}

type heldAck struct {
	device  string
	ack     *wirepb.Ack
	v       verdict
	covered [2]uint64
}

// handle checks one batch and decides on its answer (nil: none).
func (r *responder) handle(m mqtt.Message) *heldAck {
	device, _, err := wire.ParseTopic(m.Topic())
	if err != nil {
		r.fail("topic: %v", err)
		return nil
	}
	if r.oldHub && wire.Codec(m.Payload()[2]) == wire.CodecColumns {
		// What hubd before the columnar codec answered: it could not read
		// the batch, so the answer names no stream and no range.
		r.mu.Lock()
		r.refusedColumns++
		r.mu.Unlock()
		return &heldAck{device: device, ack: &wirepb.Ack{StreamId: make([]byte, 16), Status: wirepb.AckStatus_ACK_STATUS_REJECTED,
			Reason: "malformed: wire: malformed payload: unknown codec 3", ServerTimeNs: time.Now().UnixNano()}}
	}
	b, err := wire.DecodeBatch(m.Payload(), wire.Limits{})
	if err != nil {
		r.fail("decode batch: %v", err)
		return nil
	}
	n := uint64(len(b.Events))
	if n == 0 || b.FirstSeq == 0 || b.DeviceId != device || len(b.StreamId) != 16 || !b.RangeAcks {
		r.fail("bad batch header: device %q first %d events %d range_acks %v", b.DeviceId, b.FirstSeq, n, b.RangeAcks)
		return nil
	}
	last := b.FirstSeq + n - 1
	for _, g := range b.Gaps {
		if g.FirstSeq <= last && g.LastSeq >= b.FirstSeq {
			// hubd rejects such a batch (validateGaps), losing its events.
			r.fail("batch [%d, %d] reports gap [%d, %d] over its own events", b.FirstSeq, last, g.FirstSeq, g.LastSeq)
		}
	}
	r.mu.Lock()
	for _, g := range b.Gaps {
		r.gaps = append(r.gaps, [2]uint64{g.FirstSeq, g.LastSeq})
	}
	key := [2]uint64{b.FirstSeq, last}
	r.arrivals[key]++
	arrival := r.arrivals[key]
	r.bytes += len(m.Payload())
	r.codecs[wire.Codec(m.Payload()[2])]++
	fresh := false
	if r.light {
		if arrival == 1 {
			r.events += int(n)
			fresh = true
		}
	} else {
		for i, e := range b.Events {
			seq := b.FirstSeq + uint64(i)
			if e.Value != float64(seq) || e.Metric != "temp" {
				r.errs = append(r.errs, fmt.Sprintf("seq %d carries value %v metric %q", seq, e.Value, e.Metric))
			}
			if r.received[seq] == 0 {
				fresh = true
				r.events++
			}
			r.received[seq]++
			r.methods[seq] = e.Method
		}
		if arrival == 1 {
			r.order = append(r.order, b.FirstSeq)
			r.batchSizes = append(r.batchSizes, int(n))
		}
	}
	r.mu.Unlock()
	v := verdict{}
	if r.policy != nil {
		v = r.policy(b, arrival)
	}
	if v.drop {
		return nil
	}
	a := &wirepb.Ack{StreamId: b.StreamId, FirstSeq: b.FirstSeq, LastSeq: last, Status: wirepb.AckStatus_ACK_STATUS_OK, ServerTimeNs: time.Now().UnixNano()}
	switch {
	case v.reject != "":
		a.Status, a.Reason = wirepb.AckStatus_ACK_STATUS_REJECTED, v.reject
	case !fresh:
		a.Status = wirepb.AckStatus_ACK_STATUS_DUPLICATE
	}
	if v.reject == "" && len(v.refused) > 0 {
		a.Refused = v.refused
		for _, g := range v.refused {
			a.RefusedEvents += g.LastSeq - g.FirstSeq + 1
		}
	}
	return &heldAck{device: device, ack: a, v: v, covered: key}
}

// send publishes an answer (after its delay, with its duplicates).
func (r *responder) send(h *heldAck) {
	payload, err := wire.EncodeAck(h.ack)
	if err != nil {
		r.fail("encode ack: %v", err)
		return
	}
	pub := func() {
		if !r.light {
			r.mu.Lock()
			for s := h.covered[0]; s <= h.covered[1]; s++ {
				r.answered[s] = true
			}
			r.mu.Unlock()
		}
		for range 1 + h.v.dups {
			r.cli.Publish(wire.AckTopic(h.device), r.ackQoS, false, payload)
		}
	}
	if h.v.delay > 0 {
		time.AfterFunc(h.v.delay, pub)
		return
	}
	pub()
}

func (r *responder) fail(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// check verifies that seqs 1..n each arrived (at least once) and were
// answered.
func (r *responder) check(t testing.TB, n uint64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := uint64(1); s <= n; s++ {
		if r.received[s] == 0 {
			t.Fatalf("seq %d never arrived", s)
		}
		if !r.answered[s] {
			t.Fatalf("seq %d never answered", s)
		}
	}
	if len(r.received) != int(n) {
		t.Fatalf("responder received %d distinct seqs, want %d", len(r.received), n)
	}
}

func (r *responder) eventCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events
}
