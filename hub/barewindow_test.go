package hub

import (
	"edgeflow/hub/hubapi"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBareDurationWindowHTTP: GET /v1/aggregates with window=2m or
// window=10s, as Grafana and InfluxDB users write it, answers as
// tumbling:2m and tumbling:10s do; a configured name still wins; a
// duration that is not a multiple of the resolution is a 400 naming the
// window parameter.
func TestBareDurationWindowHTTP(t *testing.T) {
	o := aggTestOptions(t, t.TempDir())
	o.Aggregate.Resolution = 5 * time.Second
	s := startHub(t, o)
	h := s.Handler()
	d := newDevice(t, "tcp://"+s.BrokerAddr(), "bare")
	base := time.Now().Add(-time.Hour).Truncate(time.Hour)
	var times []int64
	var vals []float64
	for i := range 30 {
		times, vals = append(times, base.Add(time.Duration(i)*7*time.Second).UnixNano()), append(vals, float64(i))
	}
	d.send(timedBatch("bare", d.stream, 1, times, vals))
	waitCount(t, s, base, 30)

	from, to := base.Add(-time.Minute), base.Add(time.Hour)
	for bare, explicit := range map[string]string{"2m": "tumbling:2m", "10s": "tumbling:10s"} {
		var got, want hubapi.AggregatesResponse
		if code, body := getJSON(t, h, aggPath("temp", bare, from, to, ""), &got); code != 200 {
			t.Fatalf("window=%s: %d %s", bare, code, body)
		}
		if code, body := getJSON(t, h, aggPath("temp", explicit, from, to, ""), &want); code != 200 {
			t.Fatalf("window=%s: %d %s", explicit, code, body)
		}
		if got.Window != bare || len(got.Windows) == 0 || !reflect.DeepEqual(got.Windows, want.Windows) {
			t.Errorf("window=%s answered %q with %d windows, want %s's %d", bare, got.Window, len(got.Windows), explicit, len(want.Windows))
		}
	}

	// The configured window named "1m" (tumbling 1m) and the configured
	// hopping "5m-1m" keep answering by name.
	var named, hop hubapi.AggregatesResponse
	getJSON(t, h, aggPath("temp", "1m", from, to, ""), &named)
	getJSON(t, h, aggPath("temp", "5m-1m", from, to, ""), &hop)
	if len(named.Windows) == 0 || len(hop.Windows) <= len(named.Windows) {
		t.Errorf("configured windows: %d windows of 1m, %d of 5m-1m", len(named.Windows), len(hop.Windows))
	}

	for window, want := range map[string]string{
		"7s":     `"7s" is a tumbling window of 7s, not a positive multiple of the resolution 5s`,
		"0s":     `not a positive multiple of the resolution 5s`,
		"weekly": `no configured window "weekly"`,
	} {
		code, body := getJSON(t, h, aggPath("temp", window, from, to, ""), nil)
		var e hubapi.APIError
		if err := json.Unmarshal(body, &e); err != nil || code != 400 || e.Param != "window" || !strings.Contains(e.Error, want) {
			t.Errorf("window=%s: %d %s, want a 400 naming window with %q", window, code, body, want)
		}
	}
}
