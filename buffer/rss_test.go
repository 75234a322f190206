package buffer

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// The RSS child fills a store with 1,000,000 events of 40 bytes in one
// profile, reads them all back once (as an uplink draining the backlog
// would), and prints its peak and current resident set size.
func init() {
	spec := os.Getenv("BUFFER_RSS_CHILD")
	if spec == "" {
		return
	}
	dir, profile, _ := strings.Cut(spec, ",")
	debug.SetGCPercent(50)
	s, err := Open(dir, Options{Profile: Profile(profile), Logger: quietLogger()})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	st, _ := s.Stream("rss", StreamOptions{MaxBytes: 1 << 30})
	batch := benchBatch(1000)
	for i := 0; i < 1000; i++ {
		if _, err := st.Append(context.Background(), batch); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
	}
	for seq := uint64(1); ; {
		recs, err := st.ReadFrom(seq, 1000, 1<<20)
		if err != nil || len(recs) == 0 {
			break
		}
		seq = recs[len(recs)-1].Seq + 1
	}
	runtime.GC()
	if pf := os.Getenv("BUFFER_RSS_HEAP"); pf != "" {
		if f, err := os.Create(pf); err == nil {
			pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	fmt.Printf("depth=%d hwm=%s rss=%s anon=%s file=%s\n", st.Stats().Depth, procStatus("VmHWM"), procStatus("VmRSS"), procStatus("RssAnon"), procStatus("RssFile"))
	if os.Getenv("BUFFER_RSS_IDLE") != "" {
		time.Sleep(25 * time.Second)
		debug.FreeOSMemory()
		fmt.Printf("idle: rss=%s anon=%s file=%s\n", procStatus("VmRSS"), procStatus("RssAnon"), procStatus("RssFile"))
	}
	s.Close()
	os.Exit(0)
}

func procStatus(field string) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.ReplaceAll(strings.TrimSpace(v), " ", "")
		}
	}
	return "?"
}

// TestProfileRSS reports the resident set of a process holding 1,000,000
// buffered events in each profile (a measurement, printed; not asserted).
func TestProfileRSS(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("measurement; linux only")
	}
	for _, c := range []struct {
		p        Profile
		memLimit string
	}{{ProfileDefault, ""}, {ProfileLowMemory, ""}, {ProfileLowMemory, "32MiB"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "BUFFER_RSS_CHILD="+t.TempDir()+","+string(c.p))
		if c.memLimit != "" {
			cmd.Env = append(cmd.Env, "GOMEMLIMIT="+c.memLimit)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", c.p, err, out)
		}
		t.Logf("profile %s GOMEMLIMIT=%q, 1M events of %d bytes buffered: %s", c.p, c.memLimit, benchEventBytes, strings.TrimSpace(string(out)))
		if !strings.Contains(string(out), "depth=1000000") {
			t.Fatalf("child did not buffer 1M events: %s", out)
		}
	}
}
