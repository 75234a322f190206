package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"edgeflow/internal/testbroker"
)

// TestBinaryOneBadEventLosesNothing runs edgeagent and hubd: 50 good
// events, one stamped 1985 (which the hub refuses for a trusted clock),
// 50 more, over HTTP, and the same over UDP line protocol. The bad event
// is refused at ingest (400 naming its line and field; the UDP line
// dropped and counted by reason) and every good one reaches the hub: none
// is lost with a batch the hub rejects.
func TestBinaryOneBadEventLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	hubBin := buildBinary(t, "edgeflow/cmd/hubd", "amd64")
	agentBin := buildBinary(t, "edgeflow/cmd/edgeagent", "amd64")
	dir := t.TempDir()
	mqttAddr := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	hubHTTP := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	agentHTTP := fmt.Sprintf("127.0.0.1:%d", testbroker.FreePort(t))
	agentUDP := freeUDPAddr(t)
	const device = "one-bad-1"
	hub := startProc(t, []string{hubBin, "--data-dir", filepath.Join(dir, "hub"), "--http-addr", hubHTTP,
		"--mqtt-listen", mqttAddr, "--log-level", "warn"})
	agent := startProc(t, []string{agentBin, "--device-id", device, "--data-dir", filepath.Join(dir, "agent"),
		"--listen", agentHTTP, "--udp-listen", agentUDP, "--mqtt-url", "tcp://" + mqttAddr,
		"--ntp-servers", "", "--time-hub=false", "--trust-device-clock", "--log-level", "warn", "--drain-timeout", "10s"})
	base := "http://" + agentHTTP
	waitFor(t, 60*time.Second, "agent answers /healthz", func() (bool, string) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false, err.Error() + "; log: " + agent.logText()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	post := func(body string) (int, string) {
		resp, err := http.Post(base+"/v1/events", "application/x-ndjson", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := func(from, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "{\"metric\":\"temp\",\"value\":%d}\n", from+i)
		}
		return b.String()
	}
	if code, body := post(good(0, 50)); code != 200 {
		t.Fatalf("first 50: %d %s", code, body)
	}
	code, body := post(`{"metric":"temp","value":-1,"ts":"1985-01-01T00:00:00Z"}`)
	if code != 400 || !strings.Contains(body, "line 1") || !strings.Contains(body, "ts") || !strings.Contains(body, "1985-01-01") {
		t.Fatalf("the 1985 event: %d %s", code, body)
	}
	if code, body := post(good(50, 50)); code != 200 {
		t.Fatalf("last 50: %d %s", code, body)
	}
	// The same over UDP: 50 good lines, one of 1985, 50 good.
	var dgram strings.Builder
	for i := range 101 {
		if i == 50 {
			fmt.Fprintf(&dgram, "temp value=-1 %d\n", time.Date(1985, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			continue
		}
		fmt.Fprintf(&dgram, "temp value=%d\n", 100+i)
	}
	c, err := net.Dial("udp", agentUDP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(dgram.String())); err != nil {
		t.Fatal(err)
	}

	var dv struct {
		Streams []struct {
			Applied    [][2]uint64       `json:"applied"`
			Events     uint64            `json:"events"`
			GapEvents  uint64            `json:"gap_events"`
			GapReasons map[string]uint64 `json:"gap_reasons"`
		} `json:"streams"`
	}
	waitFor(t, 60*time.Second, "hub has all 200 good events", func() (bool, string) {
		if err := getJSON("http://"+hubHTTP+"/v1/devices/"+device, &dv); err != nil {
			return false, err.Error() + "; hub log: " + hub.logText()
		}
		ok := len(dv.Streams) == 1 && dv.Streams[0].Events == 200 && len(dv.Streams[0].Applied) == 1 &&
			dv.Streams[0].Applied[0] == [2]uint64{1, 200}
		return ok, fmt.Sprintf("%+v", dv)
	})
	if dv.Streams[0].GapEvents != 0 {
		t.Fatalf("gaps at the hub: %+v", dv.Streams[0])
	}
	var st struct {
		Buffer struct {
			Depth uint64 `json:"depth"`
		} `json:"buffer"`
		Link struct {
			Gaps struct {
				Events uint64 `json:"events"`
			} `json:"gaps"`
		} `json:"link"`
	}
	waitFor(t, 30*time.Second, "the agent has the hub's acks for all events", func() (bool, string) {
		err := getJSON(base+"/v1/status", &st)
		return err == nil && st.Buffer.Depth == 0, fmt.Sprintf("%+v %v", st, err)
	})
	if st.Link.Gaps.Events != 0 {
		t.Fatalf("the agent recorded gaps: %+v", st)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`edgeflow_agent_refused_events_total{reason="bad_time",source="http"} 1`,
		`edgeflow_agent_refused_events_total{reason="bad_time",source="udp"} 1`} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("agent /metrics lacks %s", m)
		}
	}
	agent.stop(30 * time.Second)
	hub.stop(30 * time.Second)
}

// freeUDPAddr is a loopback UDP address nothing listens on.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}
