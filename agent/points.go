package agent

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"edgeflow/clocksync"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// ErrBadEvent wraps every reason an ingested event is refused.
var ErrBadEvent = errors.New("agent: bad event")

// point is one reading as parsed, before it is stamped.
type point struct {
	metric string
	value  float64
	ts     time.Time // zero: the capture time
	tags   []*wirepb.Tag
}

// checkPoint applies the wire limits, so every stored event is one the hub
// accepts.
func checkPoint(p *point) error {
	lim := wire.DefaultLimits
	if p.metric == "" {
		return fmt.Errorf("%w: metric is empty", ErrBadEvent)
	}
	if len(p.metric) > lim.MaxStringBytes || !utf8.ValidString(p.metric) {
		return fmt.Errorf("%w: metric must be valid UTF-8 of at most %d bytes", ErrBadEvent, lim.MaxStringBytes)
	}
	if math.IsNaN(p.value) || math.IsInf(p.value, 0) {
		return fmt.Errorf("%w: value %v is not a finite number", ErrBadEvent, p.value)
	}
	if len(p.tags) > lim.MaxTags {
		return fmt.Errorf("%w: %d tags, at most %d", ErrBadEvent, len(p.tags), lim.MaxTags)
	}
	for _, t := range p.tags {
		if t.Key == "" {
			return fmt.Errorf("%w: empty tag key", ErrBadEvent)
		}
		for _, s := range []string{t.Key, t.Value} {
			if len(s) > lim.MaxStringBytes || !utf8.ValidString(s) {
				return fmt.Errorf("%w: tag %.32q: keys and values must be valid UTF-8 of at most %d bytes", ErrBadEvent, t.Key, lim.MaxStringBytes)
			}
		}
	}
	if !p.ts.IsZero() && (p.ts.Year() < 1971 || p.ts.Year() > 2200) {
		return fmt.Errorf("%w: ts %s is outside 1971..2200", ErrBadEvent, p.ts.UTC().Format(time.RFC3339))
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

// encodePoints stamps points captured at st and encodes them as wire
// Events, the buffer's records. A point with its own ts keeps the capture's
// correction (the offset barely moves between ts and now) and gets a
// monotonic time shifted by ts minus the capture's device time, so repair
// through the monotonic clock stays right; one from before this boot gets a
// negative monotonic time, which is never repaired.
func encodePoints(pts []point, st clocksync.Stamp) ([][]byte, error) {
	recs := make([][]byte, 0, len(pts))
	for i := range pts {
		p := &pts[i]
		ev := &wirepb.Event{
			Metric: p.metric, Value: p.value, Tags: p.tags,
			DeviceTimeNs: st.DeviceTime.UnixNano(), MonoNs: int64(st.Mono), BootId: st.BootID,
			OffsetNs: int64(st.Correction.Offset), UncertaintyNs: int64(st.Correction.Uncertainty),
			Method: st.Correction.Method,
		}
		if !p.ts.IsZero() {
			shift := p.ts.UnixNano() - ev.DeviceTimeNs
			ev.DeviceTimeNs = p.ts.UnixNano()
			ev.MonoNs += shift
			if ev.MonoNs < 0 {
				ev.MonoNs = -1
			}
		}
		b, err := proto.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("agent: encode event: %w", err)
		}
		recs = append(recs, b)
	}
	return recs, nil
}
