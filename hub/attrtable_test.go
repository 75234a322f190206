package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/hubapi"
	"edgeflow/wire/wirepb"
)

const (
	attrReadToken  = "read-token-for-attrs"
	attrWriteToken = "write-token-for-attrs"
)

// attrHubOptions are aggTestOptions with both HTTP tokens.
func attrHubOptions(t *testing.T, dir string) Options {
	o := aggTestOptions(t, dir)
	o.HTTPReadToken, o.HTTPWriteToken = attrReadToken, attrWriteToken
	return o
}

// attrDo sends one request to the hub's real HTTP server.
func attrDo(t *testing.T, s *Server, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func putAttrs(t *testing.T, s *Server, device, site string, from time.Time) {
	t.Helper()
	body := fmt.Sprintf(`{"attributes":{"site":%q},"effective_from":%q}`, site, from.Format(time.RFC3339))
	if code, b := attrDo(t, s, "PUT", "/v1/devices/"+device+"/attributes", attrWriteToken, body); code != 200 {
		t.Fatalf("put %s %s: %d %s", device, site, code, b)
	}
}

// attrVersion is a test's record of a version, for brute force.
type attrVersion struct {
	device, site string
	from         int64
}

// bruteSites is the 1m tumbling count and sum per (window start, site):
// each event joined with the version of its device in force at its time.
func bruteSites(sent []sentEvent, versions []attrVersion) map[string]string {
	type acc struct {
		n   int
		sum float64
	}
	m := map[string]*acc{}
	for _, e := range sent {
		site, best := "", int64(-1<<63)
		for _, v := range versions {
			if v.device == e.device && v.from <= e.t && v.from >= best {
				site, best = v.site, v.from
			}
		}
		k := fmt.Sprint(time.Unix(0, e.t).UTC().Truncate(time.Minute).Format(time.RFC3339), " ", site)
		if m[k] == nil {
			m[k] = &acc{}
		}
		m[k].n++
		m[k].sum += e.value
	}
	out := map[string]string{}
	for k, a := range m {
		out[k] = fmt.Sprintf("n=%d sum=%g", a.n, a.sum)
	}
	return out
}

// querySites answers the same from the hub's group_by=attr.site.
func querySites(t *testing.T, s *Server, base time.Time) map[string]string {
	t.Helper()
	var r hubapi.AggregatesResponse
	code, body := attrDo(t, s, "GET", aggPath("temp", "1m", base.Add(-time.Hour), base.Add(time.Hour), "&group_by=attr.site&aggs=count,sum"), attrReadToken, "")
	if code != 200 {
		t.Fatalf("query: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, w := range r.Windows {
		out[w.Start+" "+w.Group["attr.site"]] = fmt.Sprintf("n=%d sum=%g", w.Count, *w.Sum)
	}
	return out
}

// waitAttrApplied polls until the hub's windows hold n events in all.
func waitAttrApplied(t *testing.T, s *Server, base time.Time, n uint64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err := s.Engine().Query(aggregate.Query{Metric: "temp", WindowName: "1m", From: base.Add(-time.Hour), To: base.Add(time.Hour), Aggs: aggregate.AggCount})
		if err != nil {
			t.Fatal(err)
		}
		got := uint64(0)
		for _, w := range res {
			got += w.Count
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied %d events, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttributesJoinCrashRebuild: a device moves from north to south with
// some of its pre-move events sent after the move; a second device's site
// is corrected retroactively after its events arrived; events are sent
// again under sequence numbers already applied (in other batches, and
// after the crash and the rebuild); the hub is crashed (no final
// checkpoint) and restarted, then rebuilt. group_by=attr.site equals the
// brute-force join at every step.
func TestAttributesJoinCrashRebuild(t *testing.T) {
	dir := t.TempDir()
	s1 := startHub(t, attrHubOptions(t, dir))
	base := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	move := base.Add(10 * time.Minute)
	d1, d2 := newDevice(t, "tcp://"+s1.BrokerAddr(), "pump-1"), newDevice(t, "tcp://"+s1.BrokerAddr(), "pump-2")
	versions := []attrVersion{{"pump-1", "north", base.UnixNano()}, {"pump-2", "north", base.UnixNano()}, {"pump-1", "south", move.UnixNano()}}
	putAttrs(t, s1, "pump-1", "north", base)
	putAttrs(t, s1, "pump-2", "north", base)
	var sent []sentEvent
	send := func(d *device, first uint64, offsets ...time.Duration) {
		var ts []int64
		var vs []float64
		for i, off := range offsets {
			ts = append(ts, base.Add(off).UnixNano())
			vs = append(vs, float64(int(first)+i))
			sent = append(sent, sentEvent{d.id, ts[i], vs[i]})
		}
		if a := d.send(timedBatch(d.id, d.stream, first, ts, vs)); a.Status != wirepb.AckStatus_ACK_STATUS_OK {
			t.Fatalf("ack %v", a)
		}
	}
	// resend sends events again under sequence numbers the stream already
	// applied (fresh: how many of them, at the end, are new), in another
	// batch than the first time: the hub applies only the new ones.
	resend := func(d *device, first uint64, fresh int, offsets ...time.Duration) {
		t.Helper()
		var ts []int64
		var vs []float64
		for i, off := range offsets {
			ts = append(ts, base.Add(off).UnixNano())
			vs = append(vs, float64(int(first)+i))
			if i >= len(offsets)-fresh {
				sent = append(sent, sentEvent{d.id, ts[i], vs[i]})
			}
		}
		want := wirepb.AckStatus_ACK_STATUS_OK
		if fresh == 0 {
			want = wirepb.AckStatus_ACK_STATUS_DUPLICATE
		}
		if a := d.send(timedBatch(d.id, d.stream, first, ts, vs)); a.Status != want {
			t.Fatalf("ack %v, want %v", a, want)
		}
	}
	send(d1, 1, time.Minute, 2*time.Minute)
	send(d2, 1, time.Minute, 7*time.Minute, 12*time.Minute)
	resend(d2, 2, 0, 7*time.Minute)                                    // 2 again, alone
	putAttrs(t, s1, "pump-1", "south", move)                           // the move
	send(d1, 3, 11*time.Minute, 12*time.Minute)                        // after it
	send(d1, 5, 9*time.Minute, 9*time.Minute+30e9)                     // from before it, sent after it
	resend(d1, 1, 0, time.Minute, 2*time.Minute)                       // 1..2 again
	resend(d1, 5, 1, 9*time.Minute, 9*time.Minute+30e9, 3*time.Minute) // 5..6 again, 7 new (late)
	waitAttrApplied(t, s1, base, uint64(len(sent)))
	if got, want := querySites(t, s1, base), bruteSites(sent, versions); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the move:\n got %v\nwant %v", got, want)
	}
	// Correct pump-2 retroactively: it was at east from minute 5.
	putAttrs(t, s1, "pump-2", "east", base.Add(5*time.Minute))
	versions = append(versions, attrVersion{"pump-2", "east", base.Add(5 * time.Minute).UnixNano()})
	want := bruteSites(sent, versions)
	if got := querySites(t, s1, base); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the correction:\n got %v\nwant %v", got, want)
	}
	// Enrichment: stored events carry the version of their event time.
	code, body := attrDo(t, s1, "GET", fmt.Sprintf("/v1/events?device=pump-1&from=%d&to=%d", base.UnixMilli(), base.Add(time.Hour).UnixMilli()), attrReadToken, "")
	var evs hubapi.EventsResponse
	if code != 200 || json.Unmarshal([]byte(body), &evs) != nil || len(evs.Events) != 7 {
		t.Fatalf("events: %d %s", code, body)
	}
	for _, e := range evs.Events {
		wantSite := "north"
		if e.TimeMs >= move.UnixMilli() {
			wantSite = "south"
		}
		if e.Attributes["site"] != wantSite {
			t.Fatalf("event at %s carries %v, want site %s", e.Time, e.Attributes, wantSite)
		}
	}

	// Crash: no final checkpoint; the restart replays the attribute entries.
	s1.skipFinalCheckpoint = true
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := startHub(t, attrHubOptions(t, dir))
	waitAttrApplied(t, s2, base, uint64(len(sent)))
	if got := querySites(t, s2, base); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the crash:\n got %v\nwant %v", got, want)
	}
	// The same streams again after the restart: what they sent before it
	// is still a duplicate.
	d1, d2 = reconnect(t, s2, d1), reconnect(t, s2, d2)
	resend(d1, 2, 0, 2*time.Minute, 11*time.Minute)
	resend(d2, 1, 1, time.Minute, 7*time.Minute, 12*time.Minute, 14*time.Minute)
	want = bruteSites(sent, versions)
	waitAttrApplied(t, s2, base, uint64(len(sent)))
	if got := querySites(t, s2, base); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after duplicates across the crash:\n got %v\nwant %v", got, want)
	}
	if err := s2.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Rebuild, then start from the rebuilt checkpoint.
	if _, err := Rebuild(context.Background(), attrHubOptions(t, dir)); err != nil {
		t.Fatal(err)
	}
	s3 := startHub(t, attrHubOptions(t, dir))
	waitAttrApplied(t, s3, base, uint64(len(sent)))
	if got := querySites(t, s3, base); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the rebuild:\n got %v\nwant %v", got, want)
	}
	d1 = reconnect(t, s3, d1)
	resend(d1, 3, 0, 11*time.Minute, 12*time.Minute, 9*time.Minute, 9*time.Minute+30e9)
	if got := querySites(t, s3, base); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after duplicates across the rebuild:\n got %v\nwant %v", got, want)
	}
	code, body = attrDo(t, s3, "GET", "/v1/devices/pump-2/attributes/history", attrReadToken, "")
	if code != 200 || strings.Count(body, `"site"`) != 2 || !strings.Contains(body, "east") {
		t.Fatalf("history: %d %s", code, body)
	}
	code, body = attrDo(t, s3, "GET", fmt.Sprintf("/v1/devices/pump-1/attributes?at=%d", move.Add(-time.Second).UnixMilli()), attrReadToken, "")
	if code != 200 || !strings.Contains(body, `"north"`) {
		t.Fatalf("at: %d %s", code, body)
	}
	// A filter: only south.
	code, body = attrDo(t, s3, "GET", aggPath("temp", "1m", base.Add(-time.Hour), base.Add(time.Hour), "&attr.site=south&aggs=count"), attrReadToken, "")
	if code != 200 || strings.Count(body, `"start"`) != 2 || strings.Contains(body, `"count":2`) {
		t.Fatalf("filter: %d %s", code, body)
	}
}

// TestAttributesBadWrites: tokens, bad fields and off-boundary times are
// refused with the field named; nothing refused is written.
func TestAttributesBadWrites(t *testing.T) {
	s := startHub(t, attrHubOptions(t, t.TempDir()))
	ok := `{"attributes":{"site":"north"},"effective_from":"2026-01-01T00:00:00Z"}`
	cases := []struct {
		name, method, path, token, body string
		code                            int
		says                            string
	}{
		{"no token", "PUT", "/v1/devices/d1/attributes", "", ok, 401, "write token"},
		{"read token", "PUT", "/v1/devices/d1/attributes", attrReadToken, ok, 401, "write token"},
		{"bad key", "PUT", "/v1/devices/d1/attributes", attrWriteToken, `{"attributes":{"si te":"x"}}`, 400, `si te`},
		{"long value", "PUT", "/v1/devices/d1/attributes", attrWriteToken, `{"attributes":{"site":"` + strings.Repeat("x", 300) + `"}}`, 400, "attributes.site"},
		{"number value", "PUT", "/v1/devices/d1/attributes", attrWriteToken, `{"attributes":{"site":3}}`, 400, "attributes"},
		{"unknown field", "PUT", "/v1/devices/d1/attributes", attrWriteToken, `{"attributes":{},"when":1}`, 400, "when"},
		{"no attributes", "PUT", "/v1/devices/d1/attributes", attrWriteToken, `{"effective_from":0}`, 400, "attributes"},
		{"off boundary", "PUT", "/v1/devices/d1/attributes", attrWriteToken, `{"attributes":{},"effective_from":"2026-01-01T00:00:00.5Z"}`, 400, "use 2026-01-01T00:00:00Z or 2026-01-01T00:00:10Z"},
		{"bad time", "PUT", "/v1/devices/d1/attributes", attrWriteToken, `{"attributes":{},"effective_from":"yesterday"}`, 400, "effective_from"},
		{"bulk bad line", "POST", "/v1/attributes/bulk", attrWriteToken, `{"id":"d1","attributes":{}}` + "\n" + `{"id":"d 2","attributes":{}}`, 400, "line 2: id"},
		{"bulk", "POST", "/v1/attributes/bulk", attrWriteToken, `{"id":"d3","attributes":{"site":"x"},"effective_from":0}` + "\n" + `{"id":"d4","attributes":{}}`, 200, `"written": 2`},
	}
	for _, c := range cases {
		code, body := attrDo(t, s, c.method, c.path, c.token, c.body)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, code, body, c.code, c.says)
		}
	}
	if vs := s.Attributes().AttrVersions("d1"); len(vs) != 0 {
		t.Fatalf("refused writes were written: %v", vs)
	}
	if vs := s.Attributes().AttrVersions("d3"); len(vs) != 1 || vs[0].Attrs["site"] != "x" {
		t.Fatalf("bulk: %v", vs)
	}
	if code, body := attrDo(t, s, "GET", "/v1/devices/d3/attributes?at=0", "", ""); code != 401 {
		t.Fatalf("read without the read token: %d %s", code, body)
	}
}

// reconnect connects d's device (its stream) to s's broker, as the agent
// does after a hub restart.
func reconnect(t *testing.T, s *Server, d *device) *device {
	t.Helper()
	d.c.Disconnect(0)
	n := newDevice(t, "tcp://"+s.BrokerAddr(), d.id)
	n.stream = d.stream
	return n
}
