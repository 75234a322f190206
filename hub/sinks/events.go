package sinks

import (
	"context"
	"fmt"
	"time"
)

// eventsProducer writes the corrected events of the log entries.
type eventsProducer struct {
	cfg Config
	src Source
}

func (p *eventsProducer) schema() tableSchema { return eventsSchema() }

// mergeSQL inserts the staged events; an event already in the table (a
// replay after a crash between the commit and its acknowledgement) is
// skipped.
func (p *eventsProducer) mergeSQL(target, stage tableName) string {
	cols := quoted(p.schema().names())
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s ON CONFLICT (device, stream, seq) DO NOTHING", target.sql(), cols, cols, stage.sql())
}

// next reads up to BatchEntries entries after st.pos.
func (p *eventsProducer) next(ctx context.Context, st state, applied uint64) (output, state, error) {
	var out output
	next := st
	err := p.src.Read(st.pos, applied, p.cfg.BatchEntries, func(b *Batch) error {
		next.pos = b.Pos
		for i := range b.Events {
			out.rows = append(out.rows, eventRow(b, &b.Events[i]))
			out.eventTimeNs = max(out.eventTimeNs, b.Events[i].EventTimeNs)
		}
		return ctx.Err()
	})
	if err != nil {
		return output{}, st, fmt.Errorf("read the hub's log after %d: %w", st.pos, err)
	}
	return out, next, nil
}

// eventRow is the table row of one event, in eventsSchema's order.
func eventRow(b *Batch, e *Event) []any {
	var tags map[string]string
	if len(e.Tags) > 0 {
		tags = e.Tags
	} else {
		tags = map[string]string{}
	}
	return []any{b.Device, b.Stream, int64(e.Seq), e.Metric, e.Value, tags, time.Unix(0, e.EventTimeNs).UTC(),
		e.Method, e.UncertaintyNs, time.Unix(0, e.DeviceTimeNs).UTC(), b.ServerTime.UTC(), int64(b.Pos)}
}
