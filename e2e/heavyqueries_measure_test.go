package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestHeavyQueriesMeasure measures 16 concurrent heavy queries on a hubd
// loaded with E2E_HEAVY_SERIES series (400 devices × values of tag k):
// their answers, the hub's CPU, its peak RSS (VmHWM) and the latency of
// /metrics meanwhile. E2E_HEAVY_QUERY=over (default) groups by series
// (5 hopping windows each: over max_query_results from 20,001 series),
// within asks for the same without grouping. E2E_HUBD_BIN runs another
// hubd binary (e.g. one built from an older commit); every test of the
// run then uses it. A measurement: it logs, and checks only that the
// load arrived. docs/OPERATIONS.md ("Sizing", Queries) has the figures.
//
//	E2E_HEAVY_SERIES=200000 go test ./e2e -run TestHeavyQueriesMeasure -v -timeout 30m
func TestHeavyQueriesMeasure(t *testing.T) {
	series, _ := strconv.Atoi(os.Getenv("E2E_HEAVY_SERIES"))
	if series <= 0 {
		t.Skip("set E2E_HEAVY_SERIES (e.g. 200000) to measure")
	}
	if bin := os.Getenv("E2E_HUBD_BIN"); bin != "" {
		buildOnce.Do(func() {})
		hubdBin = bin
	}
	h := startHub(t, filepath.Join(t.TempDir(), "hub"), "")
	const devices = 400
	per := max(1, series/devices)
	base := time.Now().Add(-8 * time.Minute).Truncate(time.Minute)
	publishSeries(t, h.brokerURL, base, devices, per)
	for deadline := time.Now().Add(10 * time.Minute); scrape(t, h)["edgeflow_hub_events_applied_total"] < float64(devices*per); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("the load was not applied within 10 minutes")
		}
	}
	from, to := base.Add(-10*time.Minute).UnixMilli(), base.Add(20*time.Minute).UnixMilli()
	path := fmt.Sprintf("/v1/aggregates?metric=load&window=hopping:5m/1m&group_by=device,k&from=%d&to=%d", from, to)
	if os.Getenv("E2E_HEAVY_QUERY") == "within" {
		path = fmt.Sprintf("/v1/aggregates?metric=load&window=hopping:5m/1m&from=%d&to=%d", from, to)
	}
	m0 := scrape(t, h)
	hwm0 := peakRSS(t, h)
	done := make(chan struct{})
	var lat []time.Duration
	var probe sync.WaitGroup
	probe.Add(1)
	go func() { // /metrics, every 50ms while the queries run
		defer probe.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			start := time.Now()
			if resp, err := http.Get("http://" + h.httpAddr + "/metrics"); err == nil {
				resp.Body.Close()
			}
			lat = append(lat, time.Since(start))
		}
	}()
	codes := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := "error"
			if resp, err := http.Get("http://" + h.httpAddr + path); err == nil {
				resp.Body.Close()
				code = strconv.Itoa(resp.StatusCode)
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	close(done)
	probe.Wait()
	m1 := scrape(t, h)
	slices.Sort(lat)
	maxLat := time.Duration(0)
	if len(lat) > 0 {
		maxLat = lat[len(lat)-1]
	}
	t.Logf("%d series, %s: answers %v in %v, hub CPU %.2f s, RSS %d MiB before, peak RSS %d -> %d MiB, /metrics %d scrapes, slowest %v",
		devices*per, path, codes, wall.Round(time.Millisecond), m1["process_cpu_seconds_total"]-m0["process_cpu_seconds_total"],
		int64(m0["process_resident_memory_bytes"])>>20, hwm0>>20, peakRSS(t, h)>>20, len(lat), maxLat.Round(time.Millisecond))
}
