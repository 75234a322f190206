package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/internal/testbroker"
	"edgeflow/uplink"
	"edgeflow/wire/wirepb"
)

// testAgent is an Agent running until the test ends.
type testAgent struct {
	*Agent
	t    *testing.T
	url  string
	stop func() error
}

// testOptions are options for a local agent: loopback listeners, a broker
// URL where nothing listens (unless the test sets one), no time source.
func testOptions(t *testing.T) Options {
	return Options{
		DeviceID: "dev-test", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", UDPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Uplink: uplink.Options{Brokers: []string{"tcp://127.0.0.1:" + itoa(testbroker.FreePort(t))},
			BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, ConnectTimeout: time.Second,
			AckTimeout: time.Second, Linger: uplink.NoLinger, PollInterval: 20 * time.Millisecond},
		Buffer:       buffer.Options{Durability: buffer.DurabilityInterval, SyncInterval: 20 * time.Millisecond},
		DrainTimeout: NoDrain,
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// startAgent runs an agent with opts until the test ends (or stop).
func startAgent(t *testing.T, o Options) *testAgent {
	t.Helper()
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	ta := &testAgent{Agent: a, t: t, url: "http://" + a.HTTPAddr()}
	var stopped bool
	var stopErr error
	ta.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("agent did not stop within 30s")
			}
		}
		return stopErr
	}
	t.Cleanup(func() { _ = ta.stop() })
	return ta
}

// post sends body to POST /v1/events and decodes the answer.
func (ta *testAgent) post(body string) (int, IngestResult, string) {
	ta.t.Helper()
	resp, err := http.Post(ta.url+"/v1/events", "application/json", bytes.NewBufferString(body))
	if err != nil {
		ta.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var res IngestResult
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, &res); err != nil {
			ta.t.Fatalf("answer %s: %v", raw, err)
		}
	}
	return resp.StatusCode, res, string(raw)
}

// storedEvents reads every record the stream holds.
func storedEvents(t *testing.T, st *buffer.Stream) []*wirepb.Event {
	t.Helper()
	var evs []*wirepb.Event
	for seq := uint64(1); ; {
		recs, err := st.ReadFrom(seq, 1000, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			return evs
		}
		for _, r := range recs {
			ev := new(wirepb.Event)
			if err := proto.Unmarshal(r.Data, ev); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		seq = recs[len(recs)-1].Seq + 1
	}
}
