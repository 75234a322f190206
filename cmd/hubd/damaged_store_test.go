package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// The tests in this file damage a real hub store the way disks and
// operators do, then run the real hubd binary on it.

var (
	hubdBinOnce sync.Once
	hubdBinPath string
	hubdBinErr  error
)

// hubdBinary builds cmd/hubd once per test run.
func hubdBinary(t *testing.T) string {
	t.Helper()
	hubdBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hubd-bin")
		if err != nil {
			hubdBinErr = err
			return
		}
		hubdBinPath = filepath.Join(dir, "hubd")
		if out, err := exec.Command("go", "build", "-o", hubdBinPath, ".").CombinedOutput(); err != nil {
			hubdBinErr = fmt.Errorf("go build hubd: %v: %s", err, out)
		}
	})
	if hubdBinErr != nil {
		t.Fatal(hubdBinErr)
	}
	return hubdBinPath
}

// damagedStore is a stopped hub's data directory and what it answered.
type damagedStore struct {
	config  string // hubd.yaml
	dataDir string
	base    time.Time
	answers map[string][]byte
}

// damageQueries are the answers a recovered hub must give as before.
func damageQueries(base time.Time) []string {
	span := url.Values{"from": {base.Add(-time.Hour).Format(time.RFC3339)}, "to": {base.Add(time.Hour).Format(time.RFC3339)}}
	q := func(window, group string) string {
		v := url.Values{"metric": {"temp"}, "window": {window}, "group_by": {group}}
		for k, x := range span {
			v[k] = x
		}
		return "/v1/aggregates?" + v.Encode()
	}
	return []string{q("1m", "device"), q("5m-by-1m", "site"), "/v1/late", "/v1/devices/dev-a", "/v1/devices/dev-b"}
}

// getAll asks every query of a hub at addr.
func getAll(t *testing.T, addr string, queries []string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, q := range queries {
		resp, err := http.Get("http://" + addr + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s %s", q, resp.Status, b)
		}
		out[q] = b
	}
	return out
}

var (
	storeOnce sync.Once
	storeTmpl *damagedStore
)

// makeStore runs a hub in-process on a fresh directory, feeds it two
// devices' batches (large enough that Badger keeps them in its value
// log) with a checkpoint half way, waits until the answers settle, and
// stops it; the store then holds two checkpoints. It is made once and
// copied for each test.
func makeStore(t *testing.T) *damagedStore {
	t.Helper()
	storeOnce.Do(func() { storeTmpl = buildStore(t) })
	if storeTmpl == nil {
		t.Fatal("building the store failed in an earlier test")
	}
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-a", storeTmpl.dataDir, filepath.Join(dir, "data")).CombinedOutput(); err != nil {
		t.Fatalf("copy store: %v %s", err, out)
	}
	c := *storeTmpl
	c.dataDir = filepath.Join(dir, "data")
	return &c
}

func buildStore(t *testing.T) *damagedStore {
	dir, err := os.MkdirTemp("", "hubd-damage")
	if err != nil {
		t.Fatal(err)
	}
	d := &damagedStore{config: filepath.Join(dir, "hubd.yaml"), dataDir: filepath.Join(dir, "data"),
		base: time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)}
	if err := os.WriteFile(d.config, []byte(rebuildTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startConfigHub(t, []string{"--config", d.config, "--data-dir", d.dataDir, "--http-addr", "127.0.0.1:0",
		"--mqtt-listen", "127.0.0.1:0", "--tick-interval", "50ms"})
	seq := map[string]uint64{}
	streams := map[string]wire.StreamID{"dev-a": wire.NewStreamID(), "dev-b": wire.NewStreamID()}
	var events uint64
	for r := 0; r < 8; r++ {
		for k, dev := range []string{"dev-a", "dev-b"} {
			sid := streams[dev]
			b := &wirepb.Batch{DeviceId: dev, StreamId: sid[:], FirstSeq: seq[dev] + 1, SendTimeNs: time.Now().UnixNano(),
				Clock: &wirepb.ClockEstimate{Method: wirepb.TimeMethod_TIME_METHOD_NTP}}
			for i := 0; i < 120; i++ {
				n := r*120 + i
				b.Events = append(b.Events, &wirepb.Event{Metric: "temp", Value: float64((n*37+k*11)%400-150) / 8,
					DeviceTimeNs: d.base.Add(time.Duration(n)*500*time.Millisecond + time.Duration(k)*time.Millisecond).UnixNano(),
					Tags:         []*wirepb.Tag{{Key: "site", Value: dev}, {Key: "note", Value: fmt.Sprintf("reading-%d-%x", n, n*7919)}},
					MonoNs:       int64(n), BootId: "b", Method: wirepb.TimeMethod_TIME_METHOD_NTP})
			}
			seq[dev] += 120
			events += 120
			payload, err := wire.EncodeBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Publish(wire.BatchTopic(dev), payload); err != nil {
				t.Fatal(err)
			}
		}
		waitEvents(t, s, d.base, events)
		if r == 3 {
			if err := s.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	settledAnswers(t, s, d.base)
	d.answers = getAll(t, s.HTTPAddr(), damageQueries(d.base))
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d
}

// hubdRun is a hubd process the test started.
type hubdRun struct {
	cmd      *exec.Cmd
	httpAddr string
	log      *bytes.Buffer
	mu       *sync.Mutex
	done     chan struct{}
	code     int
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startHubd runs the hubd binary on d's store with extra flags.
func startHubd(t *testing.T, d *damagedStore, extra ...string) *hubdRun {
	t.Helper()
	h := &hubdRun{httpAddr: freeAddr(t), log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	args := append([]string{"--config", d.config, "--data-dir", d.dataDir, "--http-addr", h.httpAddr,
		"--mqtt-listen", freeAddr(t), "--tick-interval", "50ms", "--log-level", "info"}, extra...)
	h.cmd = exec.Command(hubdBinary(t), args...)
	h.cmd.Stdout, h.cmd.Stderr = io.Discard, lockedWriter{h.mu, h.log}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = h.cmd.Wait()
		h.code = h.cmd.ProcessState.ExitCode()
		close(h.done)
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		<-h.done
	})
	return h
}

// output is what the process wrote to stderr so far.
func (h *hubdRun) output() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.log.String()
}

// ready waits until /readyz answers 200 (true) or the process exits
// (false).
func (h *hubdRun) ready(t *testing.T) bool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-h.done:
			return false
		default:
		}
		if resp, err := http.Get("http://" + h.httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("hubd neither ready nor exited within 60s:\n%s", h.output())
	return false
}

// stop sends SIGINT and waits for the exit.
func (h *hubdRun) stop(t *testing.T) {
	t.Helper()
	_ = h.cmd.Process.Signal(os.Interrupt)
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
		t.Fatal("hubd did not stop")
	}
}

// walDir is the store's Badger directory.
func (d *damagedStore) walDir() string { return filepath.Join(d.dataDir, "wal") }

// setKeys writes raw values under keys with Badger itself.
func (d *damagedStore) setKeys(t *testing.T, kv map[string][]byte) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(d.walDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(txn *badger.Txn) error {
		for k, v := range kv {
			if err := txn.Set([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// vlog returns the path and content of the store's only value log file.
func (d *damagedStore) vlog(t *testing.T) (string, []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(d.walDir(), "*.vlog"))
	if len(files) != 1 {
		t.Fatalf("value log files %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return files[0], b
}

// checkpointOffsets are the offsets in the value log of the checkpoint
// states (their JSON starts with the registry), oldest first.
func checkpointOffsets(t *testing.T, vlog []byte) []int {
	t.Helper()
	var out []int
	for off := 0; ; {
		i := bytes.Index(vlog[off:], []byte(`{"registry":`))
		if i < 0 {
			break
		}
		out = append(out, off+i)
		off += i + 1
	}
	if len(out) < 2 {
		t.Fatalf("value log holds %d checkpoint states, want 2", len(out))
	}
	return out
}

// wantSameAnswers checks a recovered hub answers as the store's hub did.
func wantSameAnswers(t *testing.T, h *hubdRun, d *damagedStore) {
	t.Helper()
	got := getAll(t, h.httpAddr, damageQueries(d.base))
	for _, q := range damageQueries(d.base) {
		if !bytes.Equal(got[q], d.answers[q]) {
			t.Errorf("%s differs after recovery:\nbefore %s\nafter  %s", q, d.answers[q], got[q])
		}
	}
}

// metricValue reads one sample of hubd's /metrics ("" when absent).
func metricValue(t *testing.T, addr, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestDamagedCheckpointFallsBack: a newest checkpoint with garbage under
// its pointer key, or with bytes flipped in the value log where its state
// lives, is passed over for the checkpoint before it; with both damaged,
// the whole log is replayed. Each time hubd starts, says so in its log and
// counts it, and answers exactly as before.
func TestDamagedCheckpointFallsBack(t *testing.T) {
	tests := []struct {
		name, to, logLine string
		damage            func(t *testing.T, d *damagedStore)
	}{
		{"garbage pointer", "previous", "recovering from the previous checkpoint", func(t *testing.T, d *damagedStore) {
			d.setKeys(t, map[string][]byte{"c": []byte("\x00not a checkpoint\xff")})
		}},
		{"flipped bytes in the value log", "previous", "recovering from the previous checkpoint", func(t *testing.T, d *damagedStore) {
			path, b := d.vlog(t)
			offs := checkpointOffsets(t, b)
			at := offs[len(offs)-1] + 200
			for i := at; i < at+8; i++ {
				b[i] ^= 0x5a
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"both checkpoints", "log", "no usable checkpoint: replaying the whole log", func(t *testing.T, d *damagedStore) {
			d.setKeys(t, map[string][]byte{"c": []byte("garbage"), "c1": []byte(`{"pos":3,"generation":0,"chunks":1,"bytes":9}`)})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := makeStore(t)
			tt.damage(t, d)
			h := startHubd(t, d)
			if !h.ready(t) {
				t.Fatalf("hubd exited %d on a store with a damaged checkpoint:\n%s", h.code, h.output())
			}
			if out := h.output(); !strings.Contains(out, "checkpoint damaged") || !strings.Contains(out, tt.logLine) {
				t.Errorf("log does not say the checkpoint was damaged and what was used instead:\n%s", out)
			}
			if v := metricValue(t, h.httpAddr, `edgeflow_hub_checkpoint_fallbacks_total{to="`+tt.to+`"}`); v != "1" {
				t.Errorf("checkpoint_fallbacks_total{to=%q} = %q, want 1", tt.to, v)
			}
			wantSameAnswers(t, h, d)
			h.stop(t)
			// The damaged checkpoint was replaced: the next start is quiet.
			h = startHubd(t, d)
			if !h.ready(t) || strings.Contains(h.output(), "checkpoint damaged") {
				t.Fatalf("second start (exit %d):\n%s", h.code, h.output())
			}
			wantSameAnswers(t, h, d)
		})
	}
}

// TestRebuildDamagedCheckpoint: `hubd rebuild` on a store whose newest
// checkpoint is garbage uses the one before it, and on one where both are
// replays the whole log; the hub started after it answers as before.
func TestRebuildDamagedCheckpoint(t *testing.T) {
	for _, both := range []bool{false, true} {
		t.Run(fmt.Sprint("both=", both), func(t *testing.T) {
			d := makeStore(t)
			kv := map[string][]byte{"c": []byte("\x00not a checkpoint")}
			if both {
				kv["c1"] = []byte("also not one")
			}
			d.setKeys(t, kv)
			out, err := exec.Command(hubdBinary(t), "rebuild", "--config", d.config, "--data-dir", d.dataDir).CombinedOutput()
			if err != nil {
				t.Fatalf("hubd rebuild: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "checkpoint damaged") || !strings.Contains(string(out), fmt.Sprint("from_whole_log=", both)) {
				t.Errorf("rebuild output:\n%s", out)
			}
			h := startHubd(t, d)
			if !h.ready(t) || strings.Contains(h.output(), "checkpoint damaged") {
				t.Fatalf("start after rebuild (exit %d):\n%s", h.code, h.output())
			}
			wantSameAnswers(t, h, d)
		})
	}
}

// truncateBeforeNewestCheckpoint cuts the value log a little before the
// newest checkpoint's state, in the last batch logged before it: that
// batch and the newest checkpoint become unreadable.
func truncateBeforeNewestCheckpoint(t *testing.T, d *damagedStore) {
	t.Helper()
	path, b := d.vlog(t)
	offs := checkpointOffsets(t, b)
	if err := os.Truncate(path, int64(offs[len(offs)-1]-600)); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedLogStopsOrRecovers: a truncated value log makes log entries
// unreadable. hubd stops and names the positions, server times and
// devices and the choices; `hubd rebuild` says the same; with
// --recover-damaged it starts, and the loss is a gap with reason
// store_damaged on the device, a metric and a log line, also after a
// restart.
func TestDamagedLogStopsOrRecovers(t *testing.T) {
	d := makeStore(t)
	truncateBeforeNewestCheckpoint(t, d)
	h := startHubd(t, d)
	if h.ready(t) {
		t.Fatalf("hubd started on a store with unreadable log entries:\n%s", h.output())
	}
	out := h.output()
	for _, want := range []string{"hub: log damaged", "positions", "server time", "devices dev-", "--recover-damaged", "restore the data directory from a backup"} {
		if !strings.Contains(out, want) {
			t.Errorf("hubd's error does not say %q:\n%s", want, out)
		}
	}
	if h.code == 0 || strings.Count(out, "\n") > 20 || strings.Contains(out, "Unable to read") {
		t.Errorf("exit %d, %d lines (want non-zero, short, no Badger key dumps):\n%s", h.code, strings.Count(out, "\n"), out)
	}
	rb, err := exec.Command(hubdBinary(t), "rebuild", "--config", d.config, "--data-dir", d.dataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(rb), "hub: log damaged") || !strings.Contains(string(rb), "--recover-damaged") {
		t.Errorf("hubd rebuild on a damaged log: %v\n%s", err, rb)
	}

	h = startHubd(t, d, "--recover-damaged")
	if !h.ready(t) {
		t.Fatalf("hubd --recover-damaged exited %d:\n%s", h.code, h.output())
	}
	if !strings.Contains(h.output(), "hub store damaged: started without the unreadable log entries") {
		t.Errorf("no log line about the loss:\n%s", h.output())
	}
	if v := metricValue(t, h.httpAddr, "edgeflow_hub_store_damaged_entries_total"); v == "" || v == "0" {
		t.Errorf("store_damaged_entries_total = %q", v)
	}
	lost := metricValue(t, h.httpAddr, "edgeflow_hub_store_lost_events")
	if lost == "" || lost == "0" {
		t.Errorf("store_lost_events = %q", lost)
	}
	gaps := 0
	for _, dev := range []string{"dev-a", "dev-b"} {
		b := getAll(t, h.httpAddr, []string{"/v1/devices/" + dev})["/v1/devices/"+dev]
		if bytes.Contains(b, []byte(`"store_damaged":`)) {
			gaps++
		}
	}
	if gaps == 0 {
		t.Fatal("no device shows a store_damaged gap")
	}
	h.stop(t)
	h = startHubd(t, d)
	if !h.ready(t) {
		t.Fatalf("restart after recovery exited %d:\n%s", h.code, h.output())
	}
	if v := metricValue(t, h.httpAddr, "edgeflow_hub_store_lost_events"); v != lost {
		t.Errorf("after restart store_lost_events = %q, want %q", v, lost)
	}
}

// TestDamagedManifest: an empty MANIFEST is reported as a damaged store
// with the path and what to do, not as a store another hubd holds.
func TestDamagedManifest(t *testing.T) {
	d := makeStore(t)
	if err := os.WriteFile(filepath.Join(d.walDir(), "MANIFEST"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHubd(t, d)
	if h.ready(t) {
		t.Fatal("hubd started on a store with an empty MANIFEST")
	}
	out := h.output()
	if !strings.Contains(out, "hub: store damaged") || !strings.Contains(out, d.walDir()) || !strings.Contains(out, "restore the data directory from a backup") {
		t.Errorf("error does not say the store at %s is damaged and what to do:\n%s", d.walDir(), out)
	}
	if strings.Contains(out, "another hubd may hold it") || strings.Contains(out, "move the directory away") {
		t.Errorf("error names the wrong cause or advises throwing the data away:\n%s", out)
	}
}

// TestHeldStore: a store another process holds open is reported as held,
// naming the holder, not as damaged.
func TestHeldStore(t *testing.T) {
	d := makeStore(t)
	db, err := badger.Open(badger.DefaultOptions(d.walDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h := startHubd(t, d)
	if h.ready(t) {
		t.Fatal("hubd started on a store another process holds")
	}
	out := h.output()
	if !strings.Contains(out, "locked by another process") || !strings.Contains(out, fmt.Sprint("process ", os.Getpid())) || strings.Contains(out, "store damaged") {
		t.Errorf("error does not say the store is held by process %d:\n%s", os.Getpid(), out)
	}
}

// TestMain removes the binary and the store template the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if hubdBinPath != "" {
		_ = os.RemoveAll(filepath.Dir(hubdBinPath))
	}
	if storeTmpl != nil {
		_ = os.RemoveAll(filepath.Dir(storeTmpl.dataDir))
	}
	os.Exit(code)
}
