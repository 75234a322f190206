package hub

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"edgeflow/aggregate"
)

// BenchmarkQueryDayHTTP measures GET /v1/aggregates over real HTTP for one
// day of 10 s tumbling windows of one series (8,640 windows, every
// aggregate), with the day's partials in memory.
func BenchmarkQueryDayHTTP(b *testing.B) {
	o := aggTestOptions(b, b.TempDir())
	o.TickInterval = time.Hour
	s := startHub(b, o)
	day := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	eng := s.Engine()
	var id aggregate.StreamID
	for i := 0; i < 8640; i += 100 {
		batch := aggregate.Batch{Device: "d1", Stream: id, ServerTime: day.Add(24 * time.Hour).UnixNano()}
		for j := i; j < i+100 && j < 8640; j++ {
			batch.Events = append(batch.Events, aggregate.Event{Seq: uint64(j + 1), Metric: "temp", Value: float64(j % 50),
				Time: day.Add(time.Duration(j) * 10 * time.Second).UnixNano()})
		}
		if err := eng.Apply(&batch); err != nil {
			b.Fatal(err)
		}
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	url := fmt.Sprintf("%s/v1/aggregates?metric=temp&window=tumbling:10s&from=%d&to=%d", srv.URL, day.UnixMilli(), day.Add(24*time.Hour).UnixMilli())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 8640*100 {
			b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/query")
}
