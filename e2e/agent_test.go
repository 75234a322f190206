package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"edgeflow/buffer"
	"edgeflow/uplink"
	"edgeflow/wire/wirepb"
)

// agentEnv makes the test binary act as an agent: buffer + uplink in one
// process that the parent kills with SIGKILL and starts again.
const agentEnv = "EDGEFLOW_E2E_AGENT"

func init() {
	spec := os.Getenv(agentEnv)
	if spec == "" {
		return
	}
	os.Exit(runAgent(strings.Split(spec, "|")))
}

// runAgent appends events until its stream holds count of them (resuming
// after a restart), uploads them, and exits 0 once the hub acknowledged all.
func runAgent(args []string) int {
	dir, device, broker := args[0], args[1], args[3]
	count, _ := strconv.ParseUint(args[2], 10, 64)
	// Errors go to the test's log; warnings too (rejections, dropped
	// blocks, reconnects) to agent.log in the data directory, which a
	// failing chaos run prints.
	handlers := []slog.Handler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})}
	_ = os.MkdirAll(dir, 0o755)
	if f, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		defer f.Close()
		handlers = append(handlers, slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	log := slog.New(slog.NewMultiHandler(handlers...))
	store, err := buffer.Open(dir, buffer.Options{Durability: buffer.DurabilitySync, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 3
	}
	ex := parseAgentExtras(args)
	so := buffer.StreamOptions{Full: buffer.Block}
	if ex.maxBytes > 0 {
		so = buffer.StreamOptions{Full: buffer.DropOldest, MaxBytes: ex.maxBytes}
	}
	st, err := store.Stream(device, so)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 3
	}
	up, err := uplink.New(st, uplink.Options{DeviceID: device, Brokers: []string{broker}, Logger: log,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, AckTimeout: time.Second,
		MaxAckTimeout: 2 * time.Second, PollInterval: 20 * time.Millisecond, Linger: uplink.NoLinger,
		MaxBatchEvents: 200, ConnectTimeout: 2 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 3
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- up.Run(ctx) }()
	for next := st.Stats().Next; next <= count; next = st.Stats().Next {
		n := min(uint64(50), count-next+1)
		recs := make([][]byte, n)
		for i := range recs {
			seq := next + uint64(i)
			recs[i], _ = proto.Marshal(&wirepb.Event{Metric: "e2e.value", Value: float64(seq),
				DeviceTimeNs: ex.deviceTime(seq), MonoNs: int64(seq), BootId: "e2e", Method: wirepb.TimeMethod_TIME_METHOD_DEVICE,
				Tags: []*wirepb.Tag{{Key: "device", Value: device}}})
		}
		if _, err := st.Append(ctx, recs); err != nil {
			fmt.Fprintln(os.Stderr, "agent: append:", err)
			return 3
		}
		up.Notify()
		time.Sleep(ex.pause)
	}
	for st.Stats().Acked < count {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	store.Close()
	return 0
}

// agentProc is one agent process the test owns.
type agentProc struct {
	t      testing.TB
	device string
	dir    string // its data directory (buffer and agent.log)
	env    string
	cmd    *exec.Cmd
	exited chan error
}

func startAgent(t testing.TB, dir, device string, count int, broker string) *agentProc {
	a := &agentProc{t: t, device: device, dir: dir, env: agentEnv + "=" + strings.Join([]string{dir, device, strconv.Itoa(count), broker}, "|")}
	a.start()
	t.Cleanup(a.kill)
	return a
}

func (a *agentProc) start() {
	a.cmd = exec.Command(os.Args[0], "-test.run=^$")
	a.cmd.Env = append(os.Environ(), a.env)
	a.cmd.Stderr = &prefixWriter{t: a.t, prefix: a.device + ": "}
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.exited = make(chan error, 1)
	cmd := a.cmd
	go func() { a.exited <- cmd.Wait() }()
}

// crash kills the agent with SIGKILL and starts it again.
func (a *agentProc) crash() {
	a.kill()
	a.start()
}

func (a *agentProc) kill() {
	if a.cmd != nil && a.cmd.Process != nil {
		a.cmd.Process.Signal(syscall.SIGKILL)
		<-a.exited
		a.exited <- fmt.Errorf("killed")
	}
}

// wait returns the agent's exit error, or a timeout error.
func (a *agentProc) wait(within time.Duration) error {
	select {
	case err := <-a.exited:
		a.exited <- err
		return err
	case <-time.After(within):
		return fmt.Errorf("agent %s still running after %v", a.device, within)
	}
}

type prefixWriter struct {
	t      testing.TB
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.t.Log(p.prefix + strings.TrimSpace(string(b)))
	return len(b), nil
}

var _ io.Writer = (*prefixWriter)(nil)

// agentExtras are the optional fifth field of the agent's spec,
// "key=value,...": pause (between appends of 50 events, default 10ms),
// maxbytes (a drop_oldest buffer bound instead of block), clockstep (the
// device clock steps by an hour, forwards then back, every this many
// events), t0 and spacing (event seq is stamped t0 + seq*spacing, Unix
// ns, instead of the wall clock: the chaos suite's ground truth).
type agentExtras struct {
	pause       time.Duration
	maxBytes    int64
	stepEvery   uint64
	t0, spacing int64
}

func parseAgentExtras(args []string) agentExtras {
	ex := agentExtras{pause: 10 * time.Millisecond}
	if len(args) < 5 {
		return ex
	}
	for _, kv := range strings.Split(args[4], ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "pause":
			ex.pause, _ = time.ParseDuration(v)
		case "maxbytes":
			ex.maxBytes, _ = strconv.ParseInt(v, 10, 64)
		case "clockstep":
			ex.stepEvery, _ = strconv.ParseUint(v, 10, 64)
		case "t0":
			ex.t0, _ = strconv.ParseInt(v, 10, 64)
		case "spacing":
			ex.spacing, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return ex
}

// clockStep is the device clock's error at seq: +1h and 0 alternately,
// changing every stepEvery events (a clock stepped forwards, then back).
func (ex agentExtras) clockStep(seq uint64) int64 {
	if ex.stepEvery == 0 || (seq/ex.stepEvery)%2 == 0 {
		return 0
	}
	return int64(time.Hour)
}

// deviceTime is the device clock's reading for event seq: the wall clock,
// or t0 + seq*spacing when t0 is set, plus the clock step.
func (ex agentExtras) deviceTime(seq uint64) int64 {
	if ex.t0 == 0 {
		return time.Now().UnixNano() + ex.clockStep(seq)
	}
	return ex.t0 + int64(seq)*ex.spacing + ex.clockStep(seq)
}
