package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"edgeflow/aggregate"
	"edgeflow/hub/api"
)

// TestClusterAttrAggregates: three real hubs, each holding the attribute
// versions of the devices whose partitions it owns, answer attribute
// queries (group_by attr.site, alone or with other dimensions, and
// attr.KEY=VALUE filters) from any of them exactly as a reference hub
// holding every batch and every version does: each owner joins its own
// devices in its partial set (this hub's from its engine, the peers'
// through /v1/partials), and the sets merge like any others.
func TestClusterAttrAggregates(t *testing.T) {
	c := newTestCluster(t, 2*time.Second)
	sites := []string{"north", "south", "east"}
	for di, dev := range c.devices {
		// Versions start before any event (so none revises a window) and
		// every other device moves at minute 3; some have no version
		// until minute 1 (attr.site "" before).
		var vs []aggregate.AttrVersion
		if di%4 != 3 {
			vs = append(vs, aggregate.AttrVersion{From: c.base.Add(-2 * time.Minute).UnixNano(),
				Attrs: map[string]string{"site": sites[di%3], "model": fmt.Sprint("m", di%2)}})
		} else {
			vs = append(vs, aggregate.AttrVersion{From: c.base.Add(time.Minute).UnixNano(), Attrs: map[string]string{"site": "west"}})
		}
		if di%2 == 0 {
			vs = append(vs, aggregate.AttrVersion{From: c.base.Add(3 * time.Minute).UnixNano(),
				Attrs: map[string]string{"site": sites[(di+1)%3], "model": "m1"}})
		}
		for _, h := range []int{c.owner(dev), -1} {
			srv := c.ref.srv
			if h >= 0 {
				srv = c.hubs[h].srv
			}
			for _, v := range vs {
				if err := srv.WriteAttributes(context.Background(), []api.AttrWrite{{Device: dev, Version: v}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for r := -1; r < 6; r++ {
		c.round(t, r)
	}
	from, to := c.base.Add(-5*time.Minute), c.base.Add(10*time.Minute)
	queries := []string{"&group_by=attr.site", "&group_by=attr.site,device", "&group_by=room,attr.model",
		"&attr.site=north", "&attr.model=m1&group_by=attr.site,room"}
	for _, window := range []string{"1m", "5m-1m", "session:20s"} {
		for _, extra := range queries {
			code, _, want := get(t, aggURL(c.ref.url, window, from, to, extra))
			if code != 200 || len(decodeAgg(t, want).Windows) == 0 {
				t.Fatalf("reference %s%s: %d %s", window, extra, code, want)
			}
			for _, h := range c.hubs {
				code, _, got := get(t, aggURL(h.url, window, from, to, extra))
				if code != 200 || string(got) != string(want) {
					t.Fatalf("%s %s%s: %d, differs from the reference: %s", h.id, window, extra, code, aggDiff(t, got, want))
				}
			}
		}
	}
	// The sites as seen by the cluster are the versions' (not all "").
	a := decodeAgg(t, mustGet(t, aggURL(c.hubs[0].url, "1m", from, to, "&group_by=attr.site")))
	seen := map[string]bool{}
	for _, w := range a.Windows {
		seen[w.Group["attr.site"]] = true
	}
	for _, s := range append(sites, "west", "") {
		if !seen[s] {
			t.Fatalf("no window of attr.site %q among %v", s, seen)
		}
	}
}

func mustGet(t *testing.T, u string) []byte {
	t.Helper()
	code, _, body := get(t, u)
	if code != 200 {
		t.Fatalf("%s: %d %s", u, code, body)
	}
	return body
}
