package simulator

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/clocksync"
	"edgeflow/uplink"
	"edgeflow/wire/wirepb"
)

// device is one virtual device: its clock and fault models, its buffer
// stream, and the agent parts (clocksync, uplink) of its current life.
// Its worker goroutine owns every field not marked otherwise.
type device struct {
	f     *Fleet
	idx   int // the device's number, which chooses its first broker
	name  string
	class *DeviceClass
	tl    Timeline
	clock *DeviceClock
	gens  []*valueGen
	truth *DeviceTruth
	st    *buffer.Stream
	ws    *watchedStream

	linkUp   atomic.Bool   // read by the time sources' and link's goroutines
	hubDown  atomic.Bool   // the hub outage is on; read by the dialer's and time sources' goroutines
	bootAt   time.Duration // when the device boots (ramp-up), since the start
	linkSeed uint64        // seeds the link model's jitter

	powered  bool
	agentUp  bool
	stepIdx  int
	bootID   string
	waitTill time.Time

	sync       *clocksync.Clock
	syncCancel context.CancelFunc
	syncDone   chan struct{}
	hubCli     mqtt.Client // time-service connection of TimeHub devices

	up       *uplink.Uplink
	upCancel context.CancelFunc
	upDone   chan struct{}
	socks    *sockets // the uplink's connections, if it dials through the link model
}

func newDevice(f *Fleet, idx int, class *DeviceClass, rng *rand.Rand) (*device, error) {
	name := fmt.Sprintf("%s-%05d", f.sc.DevicePrefix, idx)
	off := time.Duration(0)
	if c := class.Clock.Offset; c > 0 {
		off = time.Duration(rng.Int64N(2*int64(c)+1)) - c
	}
	drift := (rng.Float64()*2 - 1) * class.Clock.DriftPPM
	d := &device{
		f: f, idx: idx, name: name, class: class, powered: true,
		tl:    BuildTimeline(&f.sc, class, rng),
		clock: NewDeviceClock(f.opts.Now, off, drift),
		truth: &DeviceTruth{Device: name, Buckets: map[BucketKey]*Agg{}},
	}
	st, err := f.store.Stream(name, buffer.StreamOptions{})
	if err != nil {
		return nil, fmt.Errorf("simulator: stream %s: %w", name, err)
	}
	d.st = st
	d.ws = &watchedStream{Stream: st, d: d}
	d.truth.StreamID = st.ID().String()
	d.truth.Appended = st.Stats().Next - 1
	d.ws.acked = st.Stats().Acked
	start := f.opts.Now()
	for i := range class.Metrics {
		d.gens = append(d.gens, newValueGen(&class.Metrics[i], rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), start))
	}
	d.bootID = fmt.Sprintf("%s-boot%d-%x", name, 0, rng.Uint32())
	d.linkSeed = rng.Uint64()
	d.bootAt = time.Duration(int64(f.sc.scaled(f.sc.RampUp)) * int64(idx) / int64(f.sc.Devices))
	return d, nil
}

// tick advances the device to true time now, el since the start of the
// run; producing is false once the run's duration is over (drain phase:
// no more events, no more faults).
func (d *device) tick(now time.Time, el time.Duration, producing bool) {
	if el < d.bootAt {
		for _, g := range d.gens {
			g.skip(now)
		}
		return
	}
	for producing && d.stepIdx < len(d.tl.Steps) && d.tl.Steps[d.stepIdx].At <= el {
		d.clock.Step(d.tl.Steps[d.stepIdx].By)
		d.stepIdx++
	}
	powered := !producing || !In(d.tl.PowerDown, el)
	agentUp := powered && (!producing || !In(d.tl.AgentDown, el))
	linkUp := !producing || !In(d.tl.LinkDown, el)
	d.linkUp.Store(linkUp)
	if hubDown := producing && In(d.tl.HubDown, el); hubDown != d.hubDown.Load() {
		// Stored before the cut: a dial that ends after the cut is refused.
		d.hubDown.Store(hubDown)
		if hubDown && d.socks != nil {
			d.socks.cut()
		}
	}

	if d.agentUp && !agentUp {
		// A power loss is never graceful; a crash is unless configured so.
		d.stopAgent(!powered || !d.class.Crash.Graceful)
	}
	if powered && !d.powered {
		// Power came back: a new boot with the clock reset to 1970.
		n := d.clock.PowerLoss()
		d.bootID = fmt.Sprintf("%s-boot%d", d.name, n)
		d.f.powerLosses.Add(1)
	}
	d.powered = powered
	if agentUp && !d.agentUp {
		d.startAgent(now)
	}
	d.agentUp = agentUp

	// A silent outage leaves the uplink running on a link that carries
	// nothing: it must find out by itself.
	wantLink := agentUp && (linkUp || d.class.Link.Silent)
	if d.up != nil && !wantLink {
		d.stopUplink()
	}
	if d.up == nil && wantLink && d.uplinkGone() {
		d.startUplink()
	}
	if producing && agentUp {
		d.produce()
	} else {
		for _, g := range d.gens {
			g.skip(now)
		}
	}
}

// startAgent starts a new agent life: a fresh clock estimator on the
// current boot (a crashed agent forgets its estimate; the boot id, and so
// in-boot repair, survives a crash but not a power loss).
func (d *device) startAgent(now time.Time) {
	d.f.agentStarts.Add(1)
	if d.class.Clock.WaitSync > 0 {
		d.waitTill = now.Add(d.class.Clock.WaitSync)
	}
	if d.class.Clock.TimeSource == TimeNone {
		return
	}
	// An agent polls every StartupPollInterval until it knows its drift
	// (a minute of samples), then every PollInterval. Simulated NTP runs
	// in this process, on the hub's machine: at 1 s, 10,000 booting
	// devices cost more CPU than the hub they load. 4 s is still a few
	// seconds to the first trusted estimate.
	o := clocksync.Options{
		Wall: d.clock.Wall, Mono: d.clock.Mono, BootID: d.bootID,
		StartupPollInterval: 4 * time.Second, PollInterval: 64 * time.Second,
		Logger: d.f.quiet,
	}
	switch d.class.Clock.TimeSource {
	case TimeNTP:
		o.Servers = []string{"ntp.fleetsim.invalid"}
		o.Dialer = ntpDialer(d.f.opts.Now, d.linkUp.Load)
	case TimeHub:
		h, err := d.hubExchanger()
		if err != nil {
			d.f.log.Error("simulator: hub time service", "device", d.name, "err", err)
			return
		}
		o.Hub = h
	}
	c, err := clocksync.New(o)
	if err != nil {
		d.f.log.Error("simulator: clocksync", "device", d.name, "err", err)
		return
	}
	ctx, cancel := context.WithCancel(d.f.runCtx)
	d.sync, d.syncCancel, d.syncDone = c, cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = c.Run(ctx)
	}(d.syncDone)
}

// stopAgent ends the agent's life: abruptly (a crash or power loss: see
// crashUplink) or cleanly.
func (d *device) stopAgent(abrupt bool) {
	if abrupt {
		d.crashUplink()
	} else {
		d.stopUplink()
	}
	if d.syncCancel != nil {
		d.syncCancel()
		d.syncCancel, d.sync = nil, nil
	}
}

// startUplink opens a new uplink on the device's stream (it resumes after
// the last acknowledged sequence number).
func (d *device) startUplink() {
	sc := d.sync
	o := d.f.uplinkOptions(d.name, d.idx)
	o.Now = d.clock.Wall
	ctx, cancel := context.WithCancel(d.f.runCtx)
	var socks *sockets
	if d.dialsThroughLink() {
		l := d.class.Link
		socks = newSockets(linkModel{latency: l.Latency, jitter: l.Jitter, silent: l.Silent,
			linkUp: d.linkUp.Load, hubUp: d.hubUp}, d.linkSeed, ctx.Done())
		o.Dial = socks.dial
	}
	if sc != nil {
		o.Clock = func() *wirepb.ClockEstimate { return sc.Estimate().Proto() }
		o.Retime = func(rec []byte) ([]byte, error) { return retime(sc, rec) }
	}
	o.OnAck = d.ws.hubAcked
	u, err := uplink.New(d.ws, o)
	if err != nil {
		cancel()
		d.f.log.Error("simulator: uplink", "device", d.name, "err", err)
		return
	}
	d.up, d.upCancel, d.upDone, d.socks = u, cancel, make(chan struct{}), socks
	d.f.uplinkStarts.Add(1)
	go func(done chan struct{}) {
		defer close(done)
		if err := u.Run(ctx); err != nil {
			d.f.log.Error("simulator: uplink stopped", "device", d.name, "err", err)
		}
	}(d.upDone)
}

// dialsThroughLink reports whether the device's uplinks need the link
// model's dialer: for latency, jitter or silent outages, to be cut by a
// hub outage, or to be dropped by an abrupt crash or a power loss.
func (d *device) dialsThroughLink() bool {
	l, c := d.class.Link, d.class.Crash
	return l.Latency > 0 || l.Jitter > 0 || l.Silent || len(d.tl.HubDown) > 0 ||
		(c.Every > 0 && !c.Graceful) || len(d.tl.PowerDown) > 0
}

// hubUp reports whether the hub accepts the device's connections now.
func (d *device) hubUp() bool { return !d.hubDown.Load() }

// stopUplink closes the uplink without waiting (its Run goroutine
// publishes the offline status and disconnects); the next one starts once
// it is gone.
func (d *device) stopUplink() {
	if d.up == nil {
		return
	}
	d.upCancel()
	d.up, d.upCancel, d.socks = nil, nil, nil
}

// crashGrace bounds how long a crashed agent's uplink may take to notice
// that its connection is gone before it is stopped anyway.
const crashGrace = 2 * time.Second

// crashUplink ends the uplink as a crash of the agent's process does: its
// connections close under it and no dial succeeds any more, so it sends
// no offline status and no DISCONNECT and the broker publishes its last
// will; its window of batches in flight is dropped with it, and the next
// agent life resends from the buffer what the hub had not acknowledged
// into it. The uplink is stopped only once it has seen its connection
// die (or after crashGrace), so that it cannot say goodbye on it: stopped
// while still connected, it would publish its offline status and wait for
// the PUBACK. The next uplink starts once it is gone, as after
// stopUplink.
func (d *device) crashUplink() {
	if d.up == nil {
		return
	}
	if d.socks == nil { // no dialer to cut (not reached: see dialsThroughLink)
		d.stopUplink()
		return
	}
	u, cancel := d.up, d.upCancel
	d.socks.kill()
	d.up, d.upCancel, d.socks = nil, nil, nil
	go func() {
		deadline := time.Now().Add(crashGrace)
		for u.Status().State == uplink.StateConnected && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
}

func (d *device) uplinkGone() bool {
	if d.upDone == nil {
		return true
	}
	select {
	case <-d.upDone:
		d.upDone = nil
		return true
	default:
		return false
	}
}

// produce captures the events that are due, unless the capture time is
// within the boundary guard (they wait for the next tick) or the agent
// still waits for its first sync.
func (d *device) produce() {
	trueNow, mono, wall := d.clock.Read()
	if !d.mayCapture(trueNow) {
		return
	}
	ev, trusted, ambiguous := d.stamp(trueNow, mono, wall)
	evs, recs := d.encodeDue(ev, trueNow)
	if len(recs) == 0 {
		return
	}
	at := time.Now()
	r, err := d.st.Append(d.f.runCtx, recs)
	if err != nil {
		if d.f.runCtx.Err() == nil {
			d.f.log.Error("simulator: append", "device", d.name, "err", err)
		}
		return
	}
	d.ws.appended(r, at)
	if d.up != nil {
		d.up.Notify() // as the agent's ingest does
	}
	if trusted {
		d.f.stampErr.Observe(time.Duration(ev.DeviceTimeNs+ev.OffsetNs-trueNow.UnixNano()), uint64(len(recs)))
	}
	d.f.appended.Add(uint64(len(recs)))
	d.recordTruth(r, evs, trueNow, trusted && !ambiguous)
}

// guard is how far from a resolution boundary this device's events keep:
// the scenario's BoundaryGuard, or none for an Unguarded class.
func (d *device) guard() time.Duration {
	if d.class.Unguarded {
		return 0
	}
	return d.f.sc.BoundaryGuard
}

// mayCapture reports whether events due at trueNow are captured on this
// pass.
func (d *device) mayCapture(trueNow time.Time) bool {
	// Workers look at every device every Tick (20 ms), and a device has an
	// event due about once a second: what follows (a clock correction, an
	// encoding) is for the passes with one. Done on every pass, it was a
	// third of the simulator's CPU at 5,000 devices.
	if !d.anyDue(trueNow) {
		return false
	}
	if nearBoundary(trueNow.UnixNano(), d.f.sc.Resolution, d.guard()) {
		return false
	}
	if !d.waitTill.IsZero() {
		if trueNow.Before(d.waitTill) && (d.sync == nil || !d.sync.Estimate().Trusted()) {
			for _, g := range d.gens {
				g.skip(trueNow)
			}
			return false
		}
		d.waitTill = time.Time{}
	}
	return true
}

// stamp builds the event's times as the agent stamps them, and says
// whether the stamp is trusted and whether it is ambiguous: the hub
// windows the event at its stamped time, and if that falls in another
// bucket than the true time, within the stamp's own uncertainty, either
// window is a right answer. Outside the uncertainty the event is counted
// at its true time, and the verifier reports the window the hub got wrong.
func (d *device) stamp(trueNow time.Time, mono time.Duration, wall time.Time) (ev *wirepb.Event, trusted, ambiguous bool) {
	ev = &wirepb.Event{DeviceTimeNs: wall.UnixNano(), MonoNs: int64(mono), BootId: d.bootID,
		Method: wirepb.TimeMethod_TIME_METHOD_UNTRUSTED}
	if d.sync != nil {
		cr := d.sync.Correct(wall, mono, d.bootID)
		ev.OffsetNs, ev.UncertaintyNs, ev.Method = int64(cr.Offset), int64(cr.Uncertainty), cr.Method
	}
	trusted = ev.Method != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED
	if trusted {
		stamped, tn := ev.DeviceTimeNs+ev.OffsetNs, trueNow.UnixNano()
		err := time.Duration(stamped - tn)
		r := int64(d.f.sc.Resolution)
		ambiguous = floorDiv(stamped, r) != floorDiv(tn, r) && err.Abs() <= time.Duration(ev.UncertaintyNs)
	}
	return ev, trusted, ambiguous
}

// pendingEvent is a captured event's metric and value, kept for the
// ground truth until the append says its sequence number.
type pendingEvent struct {
	metric string
	v      float64
}

// encodeDue encodes every due event of every generator with ev's times.
func (d *device) encodeDue(ev *wirepb.Event, trueNow time.Time) ([]pendingEvent, [][]byte) {
	var evs []pendingEvent
	var recs [][]byte
	for _, g := range d.gens {
		for range g.due(trueNow) {
			ev.Metric, ev.Value = g.spec.Name, g.value(trueNow)
			b, err := proto.Marshal(ev)
			if err != nil {
				d.f.log.Error("simulator: encode event", "err", err)
				continue
			}
			recs = append(recs, b)
			evs = append(evs, pendingEvent{ev.Metric, ev.Value})
		}
	}
	return evs, recs
}

// recordTruth adds the appended events r to the ground truth: at their
// true time when countable, else as uncertain; and samples of their true
// times for the verifier.
func (d *device) recordTruth(r buffer.Range, evs []pendingEvent, trueNow time.Time, countable bool) {
	d.truth.Appended = r.Last
	res := d.f.sc.Resolution
	for i, e := range evs {
		seq := r.First + uint64(i)
		if countable {
			d.truth.add(e.metric, trueNow.UnixNano(), e.v, res)
			if i == len(evs)-1 {
				k := BucketKey{e.metric, floorDiv(trueNow.UnixNano(), int64(res))}
				d.f.prober.offer(d.name, e.metric, k.Bucket, d.truth.Buckets[k].Count, time.Now())
			}
		} else {
			d.truth.Uncertain++
		}
		if seq%uint64(d.f.sc.Verify.TimeSampleEvery) == 0 {
			d.truth.Samples = append(d.truth.Samples, TimeSample{Seq: seq, TrueNs: trueNow.UnixNano()})
		}
	}
}

// anyDue reports whether a generator has an event due by now.
func (d *device) anyDue(now time.Time) bool {
	for _, g := range d.gens {
		if !g.next.After(now) {
			return true
		}
	}
	return false
}

// preload appends class.Preload of event history (true times before
// start), stamped as an NTP-synced agent would have stamped it then.
func (d *device) preload(ctx context.Context, start time.Time) error {
	if d.class.Preload <= 0 {
		return nil
	}
	from := start.Add(-d.class.Preload)
	res, guard := d.f.sc.Resolution, d.guard()
	var recs [][]byte
	var times []int64
	var metrics []string
	var vals []float64
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		r, err := d.st.Append(ctx, recs)
		if err != nil {
			return fmt.Errorf("simulator: preload %s: %w", d.name, err)
		}
		for i := range recs {
			seq := r.First + uint64(i)
			d.truth.add(metrics[i], times[i], vals[i], res)
			if seq%uint64(d.f.sc.Verify.TimeSampleEvery) == 0 {
				d.truth.Samples = append(d.truth.Samples, TimeSample{Seq: seq, TrueNs: times[i]})
			}
		}
		d.truth.Appended = r.Last
		d.f.appended.Add(uint64(len(recs)))
		d.ws.preloaded(r.Last)
		recs, times, metrics, vals = recs[:0], times[:0], metrics[:0], vals[:0]
		return nil
	}
	for _, g := range d.gens {
		for t := from.Add(time.Duration(g.rng.Int64N(int64(g.every) + 1))); t.Before(start); t = t.Add(g.every) {
			if nearBoundary(t.UnixNano(), res, guard) {
				continue
			}
			wall := d.clock.WallAt(t)
			ev := &wirepb.Event{Metric: g.spec.Name, Value: g.value(t), DeviceTimeNs: wall.UnixNano(),
				BootId: "preload-" + d.name, OffsetNs: t.UnixNano() - wall.UnixNano(),
				UncertaintyNs: int64(time.Millisecond), Method: wirepb.TimeMethod_TIME_METHOD_NTP}
			b, err := proto.Marshal(ev)
			if err != nil {
				return err
			}
			recs, times, metrics, vals = append(recs, b), append(times, t.UnixNano()), append(metrics, ev.Metric), append(vals, ev.Value)
			if len(recs) == 1000 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// retime is the uplink's Retime hook: clocksync's in-boot repair of an
// event stored UNTRUSTED.
func retime(c *clocksync.Clock, rec []byte) ([]byte, error) {
	if m, ok := clocksync.StoredMethod(rec); ok && m != wirepb.TimeMethod_TIME_METHOD_UNTRUSTED {
		return rec, nil // stamped trusted at capture: nothing to repair
	}
	var ev wirepb.Event
	if err := proto.Unmarshal(rec, &ev); err != nil {
		return nil, err
	}
	if !c.RepairEvent(&ev) {
		return rec, nil
	}
	return proto.Marshal(&ev)
}

// hubExchanger connects the device's time-service client (once; paho
// reconnects it) and returns an exchanger that fails while the link is down.
func (d *device) hubExchanger() (clocksync.HubExchanger, error) {
	if d.hubCli == nil {
		o := mqtt.NewClientOptions()
		for _, b := range d.f.brokersFor(d.idx) {
			o.AddBroker(b)
		}
		o.SetClientID("fleetsim-time-" + d.name)
		o.SetCleanSession(true)
		o.SetAutoReconnect(true)
		o.SetConnectRetry(true)
		o.SetConnectRetryInterval(time.Second)
		o.SetMaxReconnectInterval(10 * time.Second)
		o.SetKeepAlive(30 * time.Second)
		o.SetOrderMatters(false)
		d.hubCli = mqtt.NewClient(o)
		d.hubCli.Connect()
	}
	h, err := clocksync.NewMQTTHub(d.hubCli, d.name, d.clock.Wall, d.f.quiet)
	if err != nil {
		return nil, err
	}
	return &linkHub{h: h, up: func() bool { return d.linkUp.Load() && d.hubUp() }}, nil
}

// linkHub is a HubExchanger that fails while the device's link or the hub
// is down.
type linkHub struct {
	h  *clocksync.MQTTHub
	up func() bool
}

func (l *linkHub) Exchange(ctx context.Context, req *wirepb.TimeRequest) (*wirepb.TimeResponse, time.Time, error) {
	if !l.up() {
		return nil, time.Time{}, errNoLink
	}
	return l.h.Exchange(ctx, req)
}

// shutdown stops the device's agent parts and waits for them.
func (d *device) shutdown() {
	d.stopAgent(false)
	if d.upDone != nil {
		<-d.upDone
		d.upDone = nil
	}
	if d.syncDone != nil {
		<-d.syncDone
		d.syncDone = nil
	}
	if d.hubCli != nil {
		d.hubCli.Disconnect(100)
	}
}

// watchedStream is the stream the device's uplinks drain. It records when
// each append happened and, when the hub's ack reaches the uplink (before
// the buffer is acknowledged), observes the event-to-ack latency and
// counts acknowledged events.
type watchedStream struct {
	*buffer.Stream
	d *device

	mu         sync.Mutex
	q          []appendRec // appends not yet acknowledged, oldest first
	acked      uint64
	ackedAt    time.Time // when acked last advanced
	preloadEnd uint64
}

type appendRec struct {
	first, last uint64
	at          time.Time
}

// appended records an append that started at at. The uplink may have
// sent the records, and the hub acknowledged them, before the appending
// goroutine gets here (the buffer makes them readable at its next sync,
// whoever runs first): what acks already cover counts at once, as taking
// until the last ack, an upper bound. Left in the queue, they would wait
// for the next ack, a second or more later.
func (w *watchedStream) appended(r buffer.Range, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.First <= w.acked {
		last := min(r.Last, w.acked)
		w.d.f.observeAck(w.ackedAt.Sub(at), at, last-r.First+1)
		if last == r.Last {
			return
		}
		r.First = last + 1
	}
	w.q = append(w.q, appendRec{r.First, r.Last, at})
}

func (w *watchedStream) preloaded(last uint64) {
	w.mu.Lock()
	w.preloadEnd = last
	w.mu.Unlock()
}

// hubAcked is the uplink's OnAck: it accounts for the events the hub's
// acks now cover, and times the way back from the hub's ack.
func (w *watchedStream) hubAcked(upTo uint64, hubTimeNs int64) {
	now := time.Now()
	f := w.d.f
	if now.UnixNano() >= f.steadyFrom.Load() {
		f.ackReturn.Observe(time.Duration(max(now.UnixNano()-hubTimeNs, 0)), 1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if upTo <= w.acked {
		return
	}
	f.acked.Add(upTo - w.acked)
	if w.acked < w.preloadEnd {
		n := min(upTo, w.preloadEnd) - w.acked
		if f.preloadAcked.Add(n) == f.preloadTotal.Load() {
			f.preloadDone.CompareAndSwap(0, now.UnixNano())
		}
	}
	w.acked, w.ackedAt = upTo, now
	for len(w.q) > 0 && w.q[0].first <= upTo {
		r := &w.q[0]
		last := min(r.last, upTo)
		f.observeAck(now.Sub(r.at), r.at, last-r.first+1)
		if last == r.last {
			w.q = w.q[1:]
		} else {
			r.first = last + 1
		}
	}
}

// observeAck records the event-to-ack latency d of n events whose append
// started at at.
func (f *Fleet) observeAck(d time.Duration, at time.Time, n uint64) {
	f.latency.Observe(d, n)
	if at.UnixNano() >= f.steadyFrom.Load() {
		f.steady.Observe(d, n)
	}
}

var _ uplink.Stream = (*watchedStream)(nil)

// discard is a logger for the agent parts of thousands of devices.
func discardLogger(level slog.Level, base *slog.Logger) *slog.Logger {
	if base == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(&levelHandler{level: level, h: base.Handler()})
}

type levelHandler struct {
	level slog.Level
	h     slog.Handler
}

func (l *levelHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= l.level }
func (l *levelHandler) Handle(ctx context.Context, r slog.Record) error {
	return l.h.Handle(ctx, r)
}
func (l *levelHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return &levelHandler{l.level, l.h.WithAttrs(a)}
}
func (l *levelHandler) WithGroup(n string) slog.Handler {
	return &levelHandler{l.level, l.h.WithGroup(n)}
}
