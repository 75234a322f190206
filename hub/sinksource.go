package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/aggregate"
	"edgeflow/hub/hublog"
	"edgeflow/hub/sinks"
)

// sinkSource is the hub as package sinks sees it: the applied log
// position, the log entries as applied events, the engine.
type sinkSource struct{ s *Server }

// Applied implements sinks.Source: the applier's position, read on its
// goroutine.
func (src sinkSource) Applied(ctx context.Context) (uint64, error) {
	var pos uint64
	err := src.s.inApplier(func() error { pos = src.s.app.lastSeq; return nil })
	return pos, err
}

// FirstPosition implements sinks.Source.
func (src sinkSource) FirstPosition() (uint64, error) { return src.s.st.FirstWALSeq() }

// LogBytes implements sinks.Source: the keys' and values' sizes of the
// log entries in (from, to], read from the keys alone.
func (src sinkSource) LogBytes(from, to uint64) (uint64, error) {
	if to <= from {
		return 0, nil
	}
	var n uint64
	err := src.s.st.DB.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{hublog.PrefixWAL}})
		defer it.Close()
		for it.Seek(hublog.WALKey(from+1, 0)); it.Valid(); it.Next() {
			item := it.Item()
			seq, _, err := hublog.ParseWALKey(item.Key())
			if err != nil {
				return err
			}
			if seq > to {
				return nil
			}
			n += uint64(len(item.Key())) + uint64(item.ValueSize())
		}
		return nil
	})
	return n, err
}

// Engine implements sinks.Source.
func (src sinkSource) Engine() *aggregate.Engine { return src.s.Engine() }

// errStopRead ends a Replay early.
var errStopRead = errors.New("stop")

// Read implements sinks.Source: it replays stored entries and builds their
// applied events as the applier did (the entry holds the clock estimate
// and the fresh and refused ranges, so the result is the same).
func (src sinkSource) Read(from, to uint64, max int, fn func(*sinks.Batch) error) error {
	a := newApplier(nil, nil, nil, src.s.opts.Limits)
	n := 0
	var out sinks.Batch
	err := src.s.st.Replay(from, func(e *hublog.Entry) error {
		if e.Seq > to || n >= max {
			return errStopRead
		}
		n++
		out = sinks.Batch{Pos: e.Seq, Device: e.Device, ServerTime: time.Unix(0, e.ServerTimeNs), Events: out.Events[:0]}
		if e.Kind == hublog.KindBatch {
			v, err := a.parseStored(e)
			if err != nil {
				return err
			}
			b := a.build(e, v)
			out.Stream = b.Stream.String()
			for i := range b.Events {
				out.Events = append(out.Events, sinkEvent(&b.Events[i]))
			}
		}
		return fn(&out)
	})
	if errors.Is(err, errStopRead) {
		return nil
	}
	return err
}

// sinkEvent converts one applied event (its tags into a fresh map).
func sinkEvent(e *AppliedEvent) sinks.Event {
	out := sinks.Event{Seq: e.Seq, Metric: e.Metric, Value: e.Value, EventTimeNs: e.EventTimeNs,
		Method: strings.TrimPrefix(e.Method.String(), "TIME_METHOD_"), UncertaintyNs: e.UncertaintyNs, DeviceTimeNs: e.DeviceTimeNs}
	if len(e.Tags) > 0 {
		out.Tags = make(map[string]string, len(e.Tags))
		for _, t := range e.Tags {
			out.Tags[t.Key] = t.Value
		}
	}
	return out
}

// hubSinks are the server's running sinks.
type hubSinks struct {
	list   []*sinks.Sink
	cancel context.CancelFunc
}

// sinkOpenTimeout bounds the connection attempt at start; a target that
// does not answer by then is retried in the background.
const sinkOpenTimeout = 5 * time.Second

// startSinks builds the configured sinks, opens each once (a table that
// does not match, or a position ahead of the log, fails Start; an
// unreachable target is retried in the background) and runs them until
// Shutdown.
func (s *Server) startSinks() error {
	if len(s.opts.Sinks) == 0 {
		return nil
	}
	m, err := sinks.NewMetrics(s.opts.Registerer)
	if err != nil {
		return fmt.Errorf("register sink metrics: %w", err)
	}
	hs := &hubSinks{}
	closeAll := func() {
		for _, sk := range hs.list {
			sk.Close()
		}
	}
	for _, c := range s.opts.Sinks {
		sk, err := sinks.New(c, sinkSource{s}, m, s.log)
		if err != nil {
			closeAll()
			return fmt.Errorf("%w: Sinks: %w", ErrInvalidOptions, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), sinkOpenTimeout)
		err = sk.Open(ctx)
		cancel()
		if errors.Is(err, sinks.ErrSchemaMismatch) || errors.Is(err, sinks.ErrPositionAhead) {
			sk.Close()
			closeAll()
			return err
		}
		if err != nil {
			s.log.Warn("sink target unreachable at start; retrying in the background", "sink", c.Name, "err", err)
		}
		hs.list = append(hs.list, sk)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hs.cancel = cancel
	s.sinks.Store(hs)
	for _, sk := range hs.list {
		s.loopsWG.Add(1)
		go func() { defer s.loopsWG.Done(); sk.Run(ctx) }()
	}
	s.loopsWG.Add(1)
	go func() { defer s.loopsWG.Done(); <-s.done; cancel() }()
	return nil
}

// SinkStatuses returns each sink's status (empty without sinks).
func (s *Server) SinkStatuses() []sinks.Status {
	hs := s.sinks.Load()
	if hs == nil {
		return []sinks.Status{}
	}
	out := make([]sinks.Status, 0, len(hs.list))
	for _, sk := range hs.list {
		out = append(out, sk.Status())
	}
	return out
}

// withSinks adds GET /v1/sinks (an empty list without sinks) and GET
// /v1/alerts/outputs (alertoutputs.go) to the API's handler.
func (s *Server) withSinks(h http.Handler) http.Handler {
	serve := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"sinks": s.SinkStatuses()})
	}
	mux, ok := h.(*http.ServeMux)
	if !ok {
		mux = http.NewServeMux()
		mux.Handle("/", h)
	}
	mux.HandleFunc("GET /v1/sinks", serve)
	mux.HandleFunc("GET /v1/alerts/outputs", s.serveAlertOutputs)
	return mux
}

// sinkRetainPos lowers the retention position to what the sinks have not
// yet committed, so retention never deletes an entry a sink still needs;
// a sink more than Options.SinkMaxLag entries behind pos, or broken, no
// longer holds it (once retention deleted entries it had not written, it
// is marked broken with the gap).
func (s *Server) sinkRetainPos(pos uint64) uint64 {
	hs := s.sinks.Load()
	if hs == nil {
		return pos
	}
	out := pos
	for _, sk := range hs.list {
		st := sk.Status()
		p := st.Position
		past := s.opts.SinkMaxLag > 0 && p < pos && pos-p > s.opts.SinkMaxLag
		sk.SetPastMaxLag(past)
		if st.Broken || past {
			continue
		}
		out = min(out, p)
	}
	return out
}
