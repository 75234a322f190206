// Package hubtest holds the test helpers that the hub's packages share:
// a plausible device time, a valid batch of n events and its frame, and a
// logger that is quiet unless the test runs with -v. Only tests import it.
package hubtest

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// BaseTimeNs is a plausible device time for test events.
var BaseTimeNs = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano()

// MakeBatch builds a valid batch of n events starting at first.
func MakeBatch(device string, stream wire.StreamID, first uint64, n int) *wirepb.Batch {
	b := &wirepb.Batch{DeviceId: device, StreamId: stream[:], FirstSeq: first, SendTimeNs: BaseTimeNs + int64(first)*1e6,
		Backlog: &wirepb.Backlog{Events: 10, Bytes: 1000},
		Clock:   &wirepb.ClockEstimate{OffsetNs: 1500, UncertaintyNs: 2000, Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
	for i := 0; i < n; i++ {
		seq := first + uint64(i)
		b.Events = append(b.Events, &wirepb.Event{Metric: []string{"temp", "hum", "volt"}[seq%3], Value: float64(seq%97) / 4,
			Tags: []*wirepb.Tag{{Key: "room", Value: fmt.Sprint("r", seq%5)}}, DeviceTimeNs: BaseTimeNs + int64(seq)*1e6,
			MonoNs: int64(seq) * 1e6, BootId: "boot-1", OffsetNs: 1500, UncertaintyNs: 2000, Method: wirepb.TimeMethod_TIME_METHOD_NTP})
	}
	return b
}

// EncodeBatch frames b, failing the test if it cannot.
func EncodeBatch(t testing.TB, b *wirepb.Batch) []byte {
	t.Helper()
	p, err := wire.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// QuietLogger discards logs unless the test runs with -v, when it writes
// them to the test's log.
func QuietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// SplitBatch returns b's header (its events left out) and its events,
// each encoded as an agent's buffer stores them.
func SplitBatch(t testing.TB, b *wirepb.Batch) (*wirepb.Batch, [][]byte) {
	t.Helper()
	h := proto.Clone(b).(*wirepb.Batch)
	h.Events = nil
	var evs [][]byte
	for _, e := range b.Events {
		raw, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, raw)
	}
	return h, evs
}

// LockedBuffer is a bytes.Buffer that a logger may write while the test
// reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
