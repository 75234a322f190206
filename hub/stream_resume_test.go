package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"edgeflow/hub/hubapi"
	"edgeflow/wire/wirepb"
)

// sseMsg is one server-sent event of GET /v1/stream.
type sseMsg struct{ event, id, data string }

// readStream opens h's /v1/stream with query (and Last-Event-ID when
// lastID is not empty) and collects its "event" and "gap" messages until
// done says it has enough.
func readStream(t *testing.T, h http.Handler, query, lastID string, done func([]sseMsg) bool) []sseMsg {
	t.Helper()
	ms, err := tryReadStream(h, query, lastID, done)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// tryReadStream is readStream for any goroutine: it returns the error.
func tryReadStream(h http.Handler, query, lastID string, done func([]sseMsg) bool) ([]sseMsg, error) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/stream"+query, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("stream %s: status %d", query, resp.StatusCode)
	}
	var out []sseMsg
	var m sseMsg
	sc := bufio.NewScanner(resp.Body)
	for !done(out) {
		if !sc.Scan() {
			return out, fmt.Errorf("stream %s (Last-Event-ID %q) ended (%v) after %v", query, lastID, sc.Err(), msgIDs(out))
		}
		line := sc.Text()
		k, v, _ := strings.Cut(line, ": ")
		switch {
		case line == "":
			if m.event == "event" || m.event == "gap" {
				out = append(out, m)
			}
			m = sseMsg{}
		case k == "event":
			m.event = v
		case k == "id":
			m.id = v
		case k == "data":
			m.data = v
		}
	}
	return out, nil
}

// streamResult is what tryReadStream returned, for a reader goroutine.
type streamResult struct {
	ms  []sseMsg
	err error
}

// readStreamAsync reads like readStream on a goroutine; wait returns what
// it read.
func readStreamAsync(t *testing.T, h http.Handler, query, lastID string, done func([]sseMsg) bool) (wait func() []sseMsg) {
	ch := make(chan streamResult, 1)
	go func() {
		ms, err := tryReadStream(h, query, lastID, done)
		ch <- streamResult{ms, err}
	}()
	return func() []sseMsg {
		t.Helper()
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.ms
	}
}

// msgIDs summarises messages as event:id (and a gap's data).
func msgIDs(ms []sseMsg) []string {
	var out []string
	for _, m := range ms {
		if m.event == "gap" {
			out = append(out, "gap"+m.data)
			continue
		}
		out = append(out, m.event+":"+m.id)
	}
	return out
}

// untilID is done once an event with id last has come.
func untilID(last uint64) func([]sseMsg) bool {
	id := strconv.FormatUint(last, 10)
	return func(ms []sseMsg) bool { return len(ms) > 0 && ms[len(ms)-1].id == id }
}

// checkEvents requires ms to be exactly the events of offsets from..to, in
// order: each event's id and offset equal, and its sequence is offset+1
// (one device sending in order, so offsets follow its sequence).
func checkEvents(t *testing.T, ms []sseMsg, from, to uint64) {
	t.Helper()
	if uint64(len(ms)) != to-from+1 {
		t.Fatalf("got %d messages %v, want offsets %d..%d", len(ms), msgIDs(ms), from, to)
	}
	for i, m := range ms {
		want := from + uint64(i)
		var e hubapi.StreamEventJSON
		if err := json.Unmarshal([]byte(m.data), &e); err != nil || m.event != "event" {
			t.Fatalf("message %d: %+v (%v)", i, m, err)
		}
		if m.id != strconv.FormatUint(want, 10) || e.Offset != want || e.Seq != want+1 {
			t.Fatalf("message %d: id %s offset %d seq %d, want offset %d seq %d", i, m.id, e.Offset, e.Seq, want, want+1)
		}
	}
}

// sendSeries sends one batch of device d: sequences first..last, one a
// second of event time from start + 1s, then a marker event at marker
// that moves the watermark past them all, so every event before it is
// released to the merged stream.
func sendSeries(t *testing.T, d *device, start time.Time, first, last uint64, marker time.Time) {
	t.Helper()
	var times []int64
	var vals []float64
	for seq := first; seq <= last; seq++ {
		times, vals = append(times, start.Add(time.Duration(seq-first+1)*time.Second).UnixNano()), append(vals, float64(seq))
	}
	times, vals = append(times, marker.UnixNano()), append(vals, -1)
	if a := d.send(timedBatch(d.id, d.stream, first, times, vals)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
		t.Fatalf("ack %v", a)
	}
}

// waitReleased waits until the merged stream holds offsets up to next-1.
func waitReleased(t *testing.T, s *Server, next uint64) {
	t.Helper()
	waitFor(t, func() bool { _, n := s.Engine().StreamOffsets(); return n == next })
}

// TestStreamResumeFrom: ?from=N sends exactly the merged-stream events
// from offset N on, and takes precedence over Last-Event-ID.
func TestStreamResumeFrom(t *testing.T) {
	s := startHub(t, aggTestOptions(t, t.TempDir()))
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "res1")
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	sendSeries(t, d, base, 1, 20, base.Add(10*time.Minute)) // offsets 0..19 released, the marker (seq 21) pending
	waitReleased(t, s, 20)
	checkEvents(t, readStream(t, s.Handler(), "?from=0", "", untilID(19)), 0, 19)
	checkEvents(t, readStream(t, s.Handler(), "?from=7", "", untilID(19)), 7, 19)
	checkEvents(t, readStream(t, s.Handler(), "?from=19", "", untilID(19)), 19, 19)
	checkEvents(t, readStream(t, s.Handler(), "?from=12", "3", untilID(19)), 12, 19)
	// From the end: nothing until new events are released, then those.
	wait := readStreamAsync(t, s.Handler(), "?from=20", "", untilID(25))
	time.Sleep(100 * time.Millisecond) // most likely already waiting
	// releases the old marker (offset 20) and 22..26 (offsets 21..25)
	sendSeries(t, d, base.Add(11*time.Minute), 22, 26, base.Add(20*time.Minute))
	checkEvents(t, wait(), 20, 25)
}

// TestStreamResumeAcrossRestart: a consumer that saw part of the merged
// stream before the hub restarted resumes with Last-Event-ID afterwards
// and gets exactly the following offsets, no repeats and no gaps, then
// the events released after the restart. The stream buffer comes back
// from the shutdown checkpoint, or, after a crash, from replaying the log.
func TestStreamResumeAcrossRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			s1 := startHub(t, aggTestOptions(t, dir))
			d := newDevice(t, "tcp://"+s1.BrokerAddr(), "res2")
			base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
			sendSeries(t, d, base, 1, 40, base.Add(10*time.Minute)) // offsets 0..39, the marker (seq 41) pending
			waitReleased(t, s1, 40)
			seen := readStream(t, s1.Handler(), "?from=0", "", untilID(14))
			checkEvents(t, seen, 0, 14)
			s1.skipFinalCheckpoint = crash
			if err := s1.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			d.c.Disconnect(100)

			s2 := startHub(t, aggTestOptions(t, dir))
			if _, next := s2.Engine().StreamOffsets(); next != 40 {
				t.Fatalf("after restart the stream ends at %d, want 40", next)
			}
			checkEvents(t, readStream(t, s2.Handler(), "", seen[len(seen)-1].id, untilID(39)), 15, 39)
			d2 := newDevice(t, "tcp://"+s2.BrokerAddr(), "res2")
			d2.stream = d.stream
			wait := readStreamAsync(t, s2.Handler(), "", "29", untilID(45))
			time.Sleep(100 * time.Millisecond) // most likely already waiting
			// releases the old marker (offset 40), then 42..46 (offsets 41..45)
			sendSeries(t, d2, base.Add(11*time.Minute), 42, 46, base.Add(20*time.Minute))
			checkEvents(t, wait(), 30, 45)
		})
	}
}

// TestStreamResumeGap: resuming from an offset that has left the stream
// buffer (stream_buffer = 8) sends a "gap" event naming the oldest offset
// held, then the events from there.
func TestStreamResumeGap(t *testing.T) {
	o := aggTestOptions(t, t.TempDir())
	o.Aggregate.StreamBuffer = 8
	s := startHub(t, o)
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "res3")
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	sendSeries(t, d, base, 1, 30, base.Add(10*time.Minute)) // offsets 0..29; 22..29 held
	waitReleased(t, s, 30)
	if oldest, _ := s.Engine().StreamOffsets(); oldest != 22 {
		t.Fatalf("oldest offset held %d, want 22", oldest)
	}
	for _, c := range []struct{ query, lastID string }{{"", "2"}, {"?from=3", ""}} {
		ms := readStream(t, s.Handler(), c.query, c.lastID, untilID(29))
		var gap struct {
			From, Oldest uint64
			Error        string
		}
		if len(ms) == 0 || ms[0].event != "gap" || json.Unmarshal([]byte(ms[0].data), &gap) != nil ||
			gap.From != 3 || gap.Oldest != 22 || gap.Error == "" {
			t.Fatalf("%q %q: got %v, want a gap from 3 to 22 first", c.query, c.lastID, msgIDs(ms))
		}
		checkEvents(t, ms[1:], 22, 29)
	}
	checkEvents(t, readStream(t, s.Handler(), "?from=25", "", untilID(29)), 25, 29)
}
