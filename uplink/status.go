package uplink

import (
	"time"

	"edgeflow/buffer"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// LinkState is the state of an Uplink's broker connection.
type LinkState string

// Link states.
const (
	StateIdle       LinkState = "idle"       // Run not called yet
	StateConnecting LinkState = "connecting" // a connection attempt is running
	StateBackoff    LinkState = "backoff"    // waiting before the next attempt
	StateConnected  LinkState = "connected"
	StateStopped    LinkState = "stopped" // Run has returned
)

// Status is a snapshot of an Uplink for the agent's /v1/status.
type Status struct {
	State LinkState `json:"state"`
	// Since is when State began (Options.Now clock).
	Since time.Time `json:"since"`
	// LastError is the last connection or publish error, if any.
	LastError  string `json:"last_error,omitempty"`
	Reconnects int    `json:"reconnects"`
	// InFlightBatches and InFlightEvents await the hub's ack.
	InFlightBatches int `json:"inflight_batches"`
	InFlightEvents  int `json:"inflight_events"`
	// NextSeq is the next sequence number to read from the buffer.
	NextSeq uint64 `json:"next_seq"`
	// AckedThrough is the last sequence number the hub has answered for,
	// with everything before it (the buffer is acked through it).
	AckedThrough uint64 `json:"acked_through"`
	// LastAck is when the hub last answered a batch (zero: never).
	LastAck time.Time `json:"last_ack,omitzero"`
	// Backlog is what the buffer still holds for the hub (in flight included).
	Backlog Backlog `json:"backlog"`
	// Gaps are the events the hub answered for without applying them.
	Gaps GapStatus `json:"gaps"`
}

// Backlog is what a stream still holds for the hub.
type Backlog struct {
	Events uint64    `json:"events"`
	Bytes  int64     `json:"bytes"`
	Oldest time.Time `json:"oldest,omitzero"` // append time of the oldest held event
	Gaps   int       `json:"gaps"`            // dropped ranges not yet reported and acked
}

// Status returns a snapshot of the Uplink. Safe for concurrent use.
func (u *Uplink) Status() Status {
	u.mu.Lock()
	s := u.snap
	s.Gaps.Recent = append([]GapRecord(nil), s.Gaps.Recent...)
	u.mu.Unlock()
	st := u.st.Stats()
	s.Backlog = Backlog{Events: st.Depth, Bytes: st.Bytes, Gaps: st.Gaps}
	if st.OldestMs > 0 {
		s.Backlog.Oldest = time.UnixMilli(st.OldestMs)
	}
	return s
}

// setState records a link state change (and the error that caused it).
func (u *Uplink) setState(s LinkState, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.snap.State != s {
		u.snap.State, u.snap.Since = s, u.opts.Now()
	}
	if err != nil {
		u.snap.LastError = err.Error()
	}
}

// publishSnap copies the send loop's figures into the snapshot.
func (u *Uplink) publishSnap() {
	n, ev := u.win.len(), u.win.events()
	u.mu.Lock()
	u.snap.InFlightBatches, u.snap.InFlightEvents, u.snap.NextSeq = n, ev, u.next
	u.mu.Unlock()
}

// noteAck records an answer from the hub and, if advanced, the new
// cumulative position.
func (u *Uplink) noteAck(upTo uint64, advanced bool, at time.Time) {
	u.mu.Lock()
	u.snap.LastAck = at
	if advanced {
		u.snap.AckedThrough = upTo
	}
	u.mu.Unlock()
}

// backlogOf reads the buffer's figures for status messages.
func backlogOf(st Stream) *wirepb.Backlog {
	s := st.Stats()
	return &wirepb.Backlog{Events: s.Depth, Bytes: uint64(max(s.Bytes, 0)), OldestNs: s.OldestMs * int64(time.Millisecond)}
}

// fillStream is a Stream that reports how full it is (buffer.Stream).
type fillStream interface {
	Fill() buffer.Fill
}

// bufferFillOf reads the buffer's fill figures for status messages (nil
// for a stream that does not report them). It reads counters only.
func bufferFillOf(st Stream) *wirepb.BufferFill {
	fs, ok := st.(fillStream)
	if !ok {
		return nil
	}
	f := fs.Fill()
	return &wirepb.BufferFill{CapacityBytes: uint64(max(f.CapacityBytes, 0)), UsedBytes: uint64(max(f.UsedBytes, 0)),
		FillRate: f.Rate, RateIntervalNs: int64(f.RateInterval)}
}

// statusPayload encodes the retained status message (and the last will).
func (u *Uplink) statusPayload(online bool) []byte {
	s := &wirepb.Status{
		DeviceId:   u.opts.DeviceID,
		Online:     online,
		StreamId:   u.sid[:],
		Backlog:    backlogOf(u.st),
		TimeNs:     u.opts.Now().UnixNano(),
		Version:    u.opts.Version,
		Connection: u.connID,
	}
	if online { // a last will's figures would be those of the connection's start
		s.Buffer = bufferFillOf(u.st)
	}
	if u.opts.Clock != nil {
		s.Clock = u.opts.Clock()
	}
	b, err := wire.EncodeStatus(s)
	if err != nil { // a fixed-shape message: cannot happen short of a bug
		u.log.Error("uplink: encode status", "err", err)
	}
	return b
}
