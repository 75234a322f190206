// Package registry is what the hub knows of each device: its last
// status, backlog and clock, and per stream the applied, refused and lost
// sequence ranges. The hub's applier is its only writer, in log order;
// the HTTP API and the metrics read it. Everything in it is derived from
// log entries, so a checkpoint (Snapshot) plus a replay rebuilds it.
package registry

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"edgeflow/hub/batchview"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
	"edgeflow/hub/ranges"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Registry is what the hub knows of each device. The applier goroutine is
// its only writer; HTTP handlers and metrics read it under the lock.
// Everything in it is derived from log entries, so a checkpoint plus
// replay rebuilds it.
type Registry struct {
	mu      sync.RWMutex
	devices map[string]*deviceState
	// maxStreams is the hub's bound of streams per device, which the API
	// shows.
	maxStreams int
}

// deviceState is one device's entry. Field names are the checkpoint's JSON.
type deviceState struct {
	LastSeenNs   int64  `json:"last_seen_ns"`
	StatusKnown  bool   `json:"status_known,omitempty"`
	Online       bool   `json:"online,omitempty"`
	StatusTimeNs int64  `json:"status_time_ns,omitempty"`
	Version      string `json:"version,omitempty"`
	// Connection is the agent's connection id of the online status the
	// registry holds (0: unknown, or an agent that sends none).
	Connection uint64                 `json:"connection,omitempty"`
	Backlog    hubapi.Backlog         `json:"backlog"`
	AgentClock *clockState            `json:"agent_clock,omitempty"`
	HubClock   *clockState            `json:"hub_clock,omitempty"`
	Streams    map[string]*streamInfo `json:"streams"`
	// Buffer is the agent's buffer fill from its last online status that
	// carried one.
	Buffer *bufferState `json:"buffer,omitempty"`
}

// bufferState is an agent's buffer fill as stored in the registry.
type bufferState struct {
	CapacityBytes  uint64  `json:"capacity_bytes"`
	UsedBytes      uint64  `json:"used_bytes"`
	FillRate       float64 `json:"fill_rate,omitempty"`
	RateIntervalNs int64   `json:"rate_interval_ns,omitempty"`
	AtNs           int64   `json:"at_ns"`
}

// clockState is a clock estimate as stored in the registry.
type clockState struct {
	OffsetNs      int64   `json:"offset_ns"`
	UncertaintyNs int64   `json:"uncertainty_ns"`
	DriftPPM      float64 `json:"drift_ppm,omitempty"`
	Method        int32   `json:"method"`
	SampledAtNs   int64   `json:"sampled_at_ns,omitempty"`
}

// streamInfo is one stream of a device.
type streamInfo struct {
	Applied ranges.RangeSet `json:"applied"`
	// Refused are the sequence numbers whose events the hub refused one
	// by one; they are also in Gaps. Applied and Refused together are the
	// stream's dedup ranges.
	Refused      ranges.RangeSet   `json:"refused,omitzero"`
	Gaps         ranges.RangeSet   `json:"gaps"`
	GapReasons   map[string]uint64 `json:"gap_reasons,omitempty"`
	Batches      uint64            `json:"batches"`
	LastServerNs int64             `json:"last_server_ns"`
}

// New returns an empty registry. maxStreams is the hub's bound of streams
// per device (Options.MaxStreamsPerDevice), shown with each device.
func New(maxStreams int) *Registry {
	return &Registry{devices: map[string]*deviceState{}, maxStreams: maxStreams}
}

// device returns the device's state, creating it. Callers hold mu.
func (r *Registry) device(id string) *deviceState {
	d := r.devices[id]
	if d == nil {
		d = &deviceState{Streams: map[string]*streamInfo{}}
		r.devices[id] = d
	}
	return d
}

// ApplyBatch records an applied batch entry whose parsed payload is v.
func (r *Registry) ApplyBatch(e *hublog.Entry, v *batchview.View) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.device(e.Device)
	d.LastSeenNs = max(d.LastSeenNs, e.ServerTimeNs)
	if v.HasBacklog {
		d.Backlog = hubapi.Backlog{Events: v.Backlog.Events, Bytes: v.Backlog.Bytes, OldestNs: v.Backlog.OldestNs}
	}
	if v.HasClock {
		c := v.Clock
		d.AgentClock = &clockState{OffsetNs: c.OffsetNs, UncertaintyNs: c.UncertaintyNs, DriftPPM: c.DriftPPM, Method: int32(c.Method), SampledAtNs: c.SampledAtNs}
	}
	if e.Est.OK {
		d.HubClock = &clockState{OffsetNs: e.Est.OffsetNs, UncertaintyNs: e.Est.UncertaintyNs, Method: int32(wirepb.TimeMethod_TIME_METHOD_HUB_ESTIMATE), SampledAtNs: e.ServerTimeNs}
	}
	s := d.Streams[e.Stream.String()]
	if s == nil {
		s = &streamInfo{}
		d.Streams[e.Stream.String()] = s
	}
	for _, fr := range e.AppliedRanges() {
		s.Applied.Add(fr.First, fr.Last)
	}
	for _, r := range e.Refused {
		s.Refused.Add(r.First, r.Last)
		s.addGap(r.First, r.Last, RefusedGapPrefix+r.Fault.Reason())
	}
	s.Batches++
	s.LastServerNs = e.ServerTimeNs
	for _, g := range v.Gaps {
		s.addGap(g.First, g.Last, string(g.Reason))
	}
}

// RefusedGapPrefix starts the gap reason of events the hub refused one by
// one: "refused:bad_time", say. Gaps an agent reports carry its reasons
// (max_bytes, max_age, corrupt, or "rejected:<reason>" for a batch the hub
// rejected whole).
const RefusedGapPrefix = "refused:"

// addGap records [first, last] as a gap for reason, counting only the
// sequence numbers not already in a gap.
func (s *streamInfo) addGap(first, last uint64, reason string) {
	if added := s.Gaps.Add(first, last); added > 0 {
		if s.GapReasons == nil {
			s.GapReasons = map[string]uint64{}
		}
		s.GapReasons[reason] += added
	}
}

// ApplyStatus records a status entry.
func (r *Registry) ApplyStatus(e *hublog.Entry, st *wirepb.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.device(e.Device)
	d.LastSeenNs = max(d.LastSeenNs, e.ServerTimeNs)
	if c := st.GetConnection(); !st.GetOnline() && c != 0 && d.Online && d.Connection != 0 && c != d.Connection {
		// The will (or goodbye) of a connection older than the online one:
		// a broker that took the session over published it when it closed
		// that connection, after the new connection's online status.
		return
	}
	d.StatusKnown, d.Online, d.Connection = true, st.GetOnline(), st.GetConnection()
	d.StatusTimeNs, d.Version = st.GetTimeNs(), st.GetVersion()
	if bl := st.GetBacklog(); bl != nil {
		d.Backlog = hubapi.Backlog{Events: bl.Events, Bytes: bl.Bytes, OldestNs: bl.OldestNs}
	}
	if c := st.GetClock(); c != nil {
		d.AgentClock = &clockState{OffsetNs: c.OffsetNs, UncertaintyNs: c.UncertaintyNs, DriftPPM: c.DriftPpm, Method: int32(c.Method), SampledAtNs: c.SampledAtNs}
	}
	// An offline status (a last will) carries the figures of when its
	// connection began: the online one's are newer.
	if b := st.GetBuffer(); b != nil && st.GetOnline() {
		rate := b.GetFillRate()
		if math.IsNaN(rate) || math.IsInf(rate, 0) {
			rate = 0 // not a rate JSON (or a reader) can take
		}
		d.Buffer = &bufferState{CapacityBytes: b.GetCapacityBytes(), UsedBytes: b.GetUsedBytes(), FillRate: rate,
			RateIntervalNs: max(b.GetRateIntervalNs(), 0), AtNs: e.ServerTimeNs}
	}
}

// Snapshot returns the registry as deterministic JSON, the form a
// checkpoint stores; Restore reads it back.
func (r *Registry) Snapshot() ([]byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return json.Marshal(r.devices)
}

// Restore replaces the registry with a Snapshot's content. A device id
// that is not valid, or an entry that is null, is an error and leaves the
// registry as it was.
func (r *Registry) Restore(b []byte) error {
	devices := map[string]*deviceState{}
	if err := json.Unmarshal(b, &devices); err != nil {
		return err
	}
	for id, d := range devices {
		if err := wire.ValidateDeviceID(id); err != nil || d == nil {
			return fmt.Errorf("device %q: bad entry", id)
		}
		if d.Streams == nil {
			d.Streams = map[string]*streamInfo{}
		}
	}
	r.mu.Lock()
	r.devices = devices
	r.mu.Unlock()
	return nil
}

// info returns the API view of one device. Callers hold mu.
func (d *deviceState) info(id string) hubapi.DeviceInfo {
	out := hubapi.DeviceInfo{ID: id, LastSeen: time.Unix(0, d.LastSeenNs).UTC(), Online: d.Online, Version: d.Version, Backlog: d.Backlog, Status: "unknown", Clock: d.clockInfo()}
	if d.StatusKnown {
		out.Status = map[bool]string{true: "online", false: "offline"}[d.Online]
	}
	for sid, s := range d.Streams {
		out.Streams = append(out.Streams, hubapi.StreamInfo{
			StreamID: sid, Applied: s.Applied.Clone(), Events: s.Applied.Count(), Batches: s.Batches,
			Gaps: s.Gaps.Clone(), GapEvents: s.Gaps.Count(), GapReasons: cloneMap(s.GapReasons),
			Refused: s.Refused.Clone(), RefusedEvents: s.Refused.Count(),
			LastSeen: time.Unix(0, s.LastServerNs).UTC(),
		})
	}
	sort.Slice(out.Streams, func(i, j int) bool { return out.Streams[i].StreamID < out.Streams[j].StreamID })
	if b := d.Buffer; b != nil {
		out.Buffer = &hubapi.BufferFill{CapacityBytes: b.CapacityBytes, UsedBytes: b.UsedBytes, FillRate: b.FillRate,
			RateIntervalNs: b.RateIntervalNs, ReportedAt: time.Unix(0, b.AtNs).UTC()}
		if b.CapacityBytes > 0 {
			out.Buffer.Fill = float64(b.UsedBytes) / float64(b.CapacityBytes)
		}
	}
	return out
}

// clockInfo picks the agent's estimate when it is trusted, else the hub's.
func (d *deviceState) clockInfo() hubapi.ClockInfo {
	untrusted := int32(wirepb.TimeMethod_TIME_METHOD_UNTRUSTED)
	pick, source := d.AgentClock, "agent"
	if (pick == nil || pick.Method == untrusted) && d.HubClock != nil {
		pick, source = d.HubClock, "hub"
	}
	if pick == nil {
		return hubapi.ClockInfo{Method: MethodName(untrusted), Source: "none"}
	}
	return hubapi.ClockInfo{OffsetNs: pick.OffsetNs, UncertaintyNs: pick.UncertaintyNs, DriftPPM: pick.DriftPPM, Method: MethodName(pick.Method), Source: source}
}

// MethodName is a wire TimeMethod's name without the TIME_METHOD_ prefix,
// as the API shows it ("HUB_SYNC", "UNTRUSTED").
func MethodName(m int32) string {
	name := wirepb.TimeMethod(m).String()
	if len(name) > len("TIME_METHOD_") && name[:len("TIME_METHOD_")] == "TIME_METHOD_" {
		return name[len("TIME_METHOD_"):]
	}
	return name
}

func cloneMap(m map[string]uint64) map[string]uint64 {
	if m == nil {
		return nil
	}
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// List returns every device, sorted by id.
func (r *Registry) List() []hubapi.DeviceInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]hubapi.DeviceInfo, 0, len(r.devices))
	for id, d := range r.devices {
		out = append(out, r.info(d, id))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Get returns one device, and false when the registry has none of that id.
func (r *Registry) Get(id string) (hubapi.DeviceInfo, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.devices[id]
	if !ok {
		return hubapi.DeviceInfo{}, false
	}
	return r.info(d, id), true
}

// Counts returns the number of devices and of those online.
func (r *Registry) Counts() (all, online int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, d := range r.devices {
		if d.Online {
			online++
		}
	}
	return len(r.devices), online
}

// Page returns up to limit devices whose id sorts after after, sorted by
// id, and the id of the last one when more follow ("" otherwise). Only
// the page's devices are copied: the ids are gathered under the read lock
// and sorted outside it, so a walk over a large fleet neither copies every
// device per page nor holds up the applier while it sorts. A device that
// appears during a walk shows in it only if its id sorts after the cursor.
func (r *Registry) Page(after string, limit int) ([]hubapi.DeviceInfo, string) {
	r.mu.RLock()
	ids := make([]string, 0, len(r.devices))
	for id := range r.devices {
		if id > after {
			ids = append(ids, id)
		}
	}
	r.mu.RUnlock()
	slices.Sort(ids)
	more := len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	out := make([]hubapi.DeviceInfo, 0, len(ids))
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, id := range ids {
		// Devices are never removed, but restore replaces the whole map.
		if d, ok := r.devices[id]; ok {
			out = append(out, r.info(d, id))
		}
	}
	if !more {
		return out, ""
	}
	return out, ids[len(ids)-1]
}

// RetireStream removes a stream from a device's entry: the hub retired it
// after its idle expiry, and the device may open it again as a new one.
func (r *Registry) RetireStream(device string, stream wire.StreamID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := r.devices[device]; d != nil {
		delete(d.Streams, stream.String())
	}
}

// info returns the API view of device d with its stream count and the
// hub's bound. Callers hold mu.
func (r *Registry) info(d *deviceState, id string) hubapi.DeviceInfo {
	out := d.info(id)
	out.StreamCount, out.MaxStreams = len(d.Streams), r.maxStreams
	return out
}
