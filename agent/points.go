package agent

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/clocksync"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// faultError is a refusal for one of the wire's faults (wire.Fault), so
// ingest counts it by the hub's reason.
type faultError struct {
	fault wire.Fault
	err   error
}

func (e *faultError) Error() string { return e.err.Error() }
func (e *faultError) Unwrap() error { return e.err }

// refuse builds a faultError wrapping ErrBadEvent.
func refuse(f wire.Fault, format string, args ...any) error {
	return &faultError{f, fmt.Errorf("%w: "+format, append([]any{ErrBadEvent}, args...)...)}
}

// refusalReason is the label an ingest refusal is counted under: the
// wire fault's reason, or "malformed" for input that did not parse.
func refusalReason(err error) string {
	var fe *faultError
	if errors.As(err, &fe) {
		return fe.fault.Reason()
	}
	return "malformed"
}

// point is one reading as parsed, before it is stamped.
type point struct {
	metric string
	value  float64
	ts     time.Time // the event's own time when hasTS, else the capture time
	hasTS  bool
	tags   []*wirepb.Tag
	// line and index place the point in its request, as LineError does.
	line, index int
}

// checkPoint applies the wire's rules for what the hub accepts to the
// point as parsed (wire.CheckEvent, on the event as stamped, follows in
// stampEvents).
func checkPoint(p *point) error {
	lim := wire.DefaultLimits
	if p.metric == "" {
		return refuse(wire.FaultMetric, "metric is empty")
	}
	if !wire.CheckString(p.metric, lim) {
		return refuse(wire.FaultMetric, "metric must be valid UTF-8 of at most %d bytes", lim.MaxStringBytes)
	}
	if math.IsNaN(p.value) || math.IsInf(p.value, 0) {
		return refuse(wire.FaultValue, "value %v is not a finite number", p.value)
	}
	if len(p.tags) > lim.MaxTags {
		return refuse(wire.FaultTag, "%d tags, at most %d", len(p.tags), lim.MaxTags)
	}
	for _, t := range p.tags {
		if t.Key == "" {
			return refuse(wire.FaultTag, "empty tag key")
		}
		for _, s := range []string{t.Key, t.Value} {
			if !wire.CheckString(s, lim) {
				return refuse(wire.FaultTag, "tag %.32q: keys and values must be valid UTF-8 of at most %d bytes", t.Key, lim.MaxStringBytes)
			}
		}
	}
	if p.hasTS && !wire.DeviceTimeOK(p.ts) {
		return refuse(wire.FaultTime, "ts %s is outside 1971..2200", p.ts.UTC().Format(time.RFC3339))
	}
	return nil
}

// tagsFromMap returns m's tags sorted by key, so equal maps encode alike.
func tagsFromMap(m map[string]string) []*wirepb.Tag {
	if len(m) == 0 {
		return nil
	}
	tags := make([]*wirepb.Tag, 0, len(m))
	for k, v := range m {
		tags = append(tags, &wirepb.Tag{Key: k, Value: v})
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].Key < tags[j].Key })
	return tags
}

// encodePoints stamps points captured at st (stampEvent), checks each as
// the hub will (wire.CheckEvent) and encodes them as wire Events, the
// buffer's records. A point the hub would refuse fails the whole call
// with a *LineError naming its place and field: nothing of it is stored.
func encodePoints(pts []point, st clocksync.Stamp) ([][]byte, error) {
	recs := make([][]byte, 0, len(pts))
	for i := range pts {
		b, err := encodePoint(&pts[i], st)
		if err != nil {
			return nil, err
		}
		recs = append(recs, b)
	}
	return recs, nil
}

// encodePoint stamps, checks and encodes one point (see encodePoints).
func encodePoint(p *point, st clocksync.Stamp) ([]byte, error) {
	ev := stampEvent(p, st)
	if f := wire.CheckEvent(ev, wire.Limits{}); f != wire.FaultNone {
		return nil, &LineError{Line: p.line, Index: p.index, Err: refusal(p, ev, f)}
	}
	b, err := proto.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("agent: encode event: %w", err)
	}
	return b, nil
}

// stampEvent is the wire Event of p captured at st. A point with its own
// ts keeps the capture's correction (the offset barely moves between ts
// and now) and gets a monotonic time shifted by ts minus the capture's
// device time, so repair through the monotonic clock stays right; one
// from before this boot gets a negative monotonic time, which is never
// repaired.
func stampEvent(p *point, st clocksync.Stamp) *wirepb.Event {
	ev := &wirepb.Event{
		Metric: p.metric, Value: p.value, Tags: p.tags,
		DeviceTimeNs: st.DeviceTime.UnixNano(), MonoNs: int64(st.Mono), BootId: st.BootID,
		OffsetNs: int64(st.Correction.Offset), UncertaintyNs: int64(st.Correction.Uncertainty),
		Method: st.Correction.Method,
	}
	if p.hasTS {
		shift := p.ts.UnixNano() - ev.DeviceTimeNs
		ev.DeviceTimeNs = p.ts.UnixNano()
		ev.MonoNs += shift
		if ev.MonoNs < 0 {
			ev.MonoNs = -1
		}
	}
	return ev
}

// refusal explains why the hub would refuse ev, the stamped p, for f.
func refusal(p *point, ev *wirepb.Event, f wire.Fault) error {
	if f == wire.FaultTime {
		what := "the capture time"
		if p.hasTS {
			what = "ts " + p.ts.UTC().Format(time.RFC3339Nano)
		}
		return refuse(f, "ts: %s corrected by the agent's clock (%s, offset %v) is %s, outside the [%s, %s) the hub takes for trusted times",
			what, ev.Method, time.Duration(ev.OffsetNs),
			time.Unix(0, ev.DeviceTimeNs).Add(time.Duration(ev.OffsetNs)).UTC().Format(time.RFC3339),
			time.Unix(0, wire.MinEventTimeNs).UTC().Format(time.DateOnly), time.Unix(0, wire.MaxEventTimeNs).UTC().Format(time.DateOnly))
	}
	return refuse(f, "%s: the hub refuses it (%s)", f.Field(), f.Reason())
}
