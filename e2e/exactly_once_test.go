package e2e

import (
	"context"
	"edgeflow/internal/testbroker"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

// TestExactlyOnceUnderCrashes runs agents against a hubd process through a
// real Mosquitto, kills hubd and agents with SIGKILL again and again and
// restarts the broker, then checks that every event each agent accepted was
// applied by the hub exactly once: one applied range [1, count] per stream
// and an applied-event count equal to count.
func TestExactlyOnceUnderCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns brokers, hubs and agents")
	}
	t.Run("mosquitto", func(t *testing.T) {
		exactlyOnce(t, testbroker.StartMosquitto(t, testbroker.MosquittoOptions{Persistence: true}))
	})
	t.Run("embedded", func(t *testing.T) { exactlyOnce(t, nil) })
}

// exactlyOnce runs the scenario through mosq, or through hubd's embedded
// broker (which dies with every hubd SIGKILL) when mosq is nil.
func exactlyOnce(t *testing.T, mosq *testbroker.Mosquitto) {
	const agents, count = 3, 30000
	url := ""
	if mosq != nil {
		url = mosq.URL()
	}
	hub := startHub(t, filepath.Join(t.TempDir(), "hub"), url)
	var procs []*agentProc
	for i := 0; i < agents; i++ {
		dev := fmt.Sprintf("e2e-dev-%d", i)
		procs = append(procs, startAgent(t, filepath.Join(t.TempDir(), dev), dev, count, hub.brokerURL))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	hubKills, agentKills, brokerRestarts := 0, 0, 0
	chaosEnd := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(chaosEnd); i++ {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		switch {
		case i == 5 && mosq != nil:
			mosq.Restart()
			brokerRestarts++
		case i%2 == 0:
			hub.kill()
			hub.start()
			hubKills++
		default:
			procs[rng.IntN(agents)].crash()
			agentKills++
		}
	}
	t.Logf("faults: %d hubd SIGKILLs, %d agent SIGKILLs, %d broker restarts", hubKills, agentKills, brokerRestarts)
	for _, a := range procs {
		if err := a.wait(90 * time.Second); err != nil {
			t.Fatalf("agent %s: %v", a.device, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range procs {
		v, err := hub.device(ctx, a.device)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Streams) != 1 {
			t.Fatalf("%s: %d streams on the hub, want 1", a.device, len(v.Streams))
		}
		s := v.Streams[0]
		if len(s.Applied) != 1 || s.Applied[0] != [2]uint64{1, count} {
			t.Fatalf("%s: applied ranges %v, want [[1 %d]]", a.device, s.Applied, count)
		}
		if s.Events != count {
			t.Fatalf("%s: hub applied %d events, agent accepted %d: duplicates or losses", a.device, s.Events, count)
		}
		t.Logf("%s: %d events accepted, %d applied, ranges %v", a.device, count, s.Events, s.Applied)
	}
}
