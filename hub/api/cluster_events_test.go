package api_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"edgeflow/hub/hubapi"
	"edgeflow/hub/natslog"
)

// eventKey identifies one listed event and what a listing says of it.
type eventKey struct {
	Stream string
	Seq    uint64
	Metric string
	Value  float64
	Time   string
}

// listEvents pages through h's GET /v1/events for dev in [from, to) with
// limit per page and returns every event once (a page repeats the events
// at its next_from), failing the test on an event listed twice in a page
// or a page that is out of order or makes no progress. missing is the
// first page's missing_hubs.
func listEvents(t *testing.T, h *testHub, dev string, from, to time.Time, limit int) (events []eventKey, hubs map[eventKey]string, missing []string) {
	t.Helper()
	hubs = map[eventKey]string{}
	next := fmt.Sprint(from.UnixMilli())
	for page := 0; ; page++ {
		u := fmt.Sprintf("%s/v1/events?device=%s&from=%s&to=%d&limit=%d", h.url, dev, next, to.UnixMilli(), limit)
		code, _, body := get(t, u)
		var er hubapi.EventsResponse
		if err := json.Unmarshal(body, &er); err != nil || code != 200 {
			t.Fatalf("%s: %d %s", u, code, body)
		}
		if page == 0 {
			missing = er.MissingHubs
		}
		inPage := map[eventKey]bool{}
		last := ""
		for _, e := range er.Events {
			k := eventKey{e.Stream, e.Seq, e.Metric, e.Value, e.Time}
			if inPage[k] {
				t.Fatalf("%s: %+v twice in one page", u, k)
			}
			if e.Time < last {
				t.Fatalf("%s: %s after %s", u, e.Time, last)
			}
			inPage[k], last = true, e.Time
			if _, ok := hubs[k]; !ok {
				events = append(events, k)
				hubs[k] = e.Hub
			}
		}
		if !er.Truncated {
			return events, hubs, missing
		}
		if er.NextFrom == next || page > 1000 {
			t.Fatalf("%s: no progress (next_from %s)", u, er.NextFrom)
		}
		next = er.NextFrom
	}
}

// TestClusterEventsHistory: a device's partition moves from one hub to
// another, the new owner applying the last batch the old one applied again
// (it started from an earlier checkpoint). GET /v1/events on every hub
// lists each of the device's events once, the ones before the move from
// the old owner's log, in pages too; the reference hub that got every
// batch lists the same. A hub that does not answer, and a holder of the
// partition's history that is no member, are named in missing_hubs.
func TestClusterEventsHistory(t *testing.T) {
	c := newTestCluster(t, 2*time.Second)
	for r := -1; r < 3; r++ {
		c.round(t, r)
	}
	dev := c.devices[0]
	part := natslog.PartitionOf(dev, testPartitions)
	a := c.owner(dev)
	b := (a + 1) % testHubs
	ownedA, ownedB := ownedBy(a), ownedBy(b)
	delete(ownedA, part)
	ownedB[part] = uint64(100 + part)
	c.setAll(c.hubs[a].id, ownedA)
	c.setAll(c.hubs[b].id, ownedB)
	c.ownerOf = func(d string) int {
		if natslog.PartitionOf(d, testPartitions) == part {
			return b
		}
		return natslog.PartitionOf(d, testPartitions) % testHubs
	}
	var moved []string
	for _, d := range c.devices {
		if natslog.PartitionOf(d, testPartitions) == part {
			moved = append(moved, d)
			c.send(t, c.hubs[b], d, c.batches[d][len(c.batches[d])-1], 5)
			c.waitApplied(t, c.hubs[b], d)
		}
	}
	for r := 3; r < 6; r++ {
		c.round(t, r)
	}
	from, to := c.base.Add(-5*time.Minute), c.base.Add(10*time.Minute)
	for _, d := range moved {
		want, _, _ := listEvents(t, c.ref, d, from, to, 10_000)
		if len(want) != c.sent[d] {
			t.Fatalf("reference lists %d events of %s, sent %d", len(want), d, c.sent[d])
		}
		for _, h := range c.hubs {
			for _, limit := range []int{10_000, 4} {
				got, hubs, missing := listEvents(t, h, d, from, to, limit)
				if !slices.Equal(got, want) || len(missing) > 0 {
					t.Fatalf("%s lists %d events of %s (limit %d, missing %v), the reference %d:\n%v\n%v", h.id, len(got), d, limit, missing, len(want), got, want)
				}
				// Rounds -1..1 only the old owner applied; round 2 both (the
				// new owner's copy is listed); rounds 3.. the new owner.
				byHub := map[string]int{}
				for _, hub := range hubs {
					byHub[hub]++
				}
				if wantBy := map[string]int{c.hubs[a].id: 11, c.hubs[b].id: 20}; !maps.Equal(byHub, wantBy) {
					t.Fatalf("%s: %s's events by hub %v, want %v", h.id, d, byHub, wantBy)
				}
			}
		}
	}

	// The old owner down: its part of the history is missing, and said
	// so; so is a holder the partition's checkpoints name that is no
	// member any more (it stopped), and one that is a member is asked.
	for _, h := range c.hubs {
		h.view.mu.Lock()
		h.view.holders = map[int][]string{part: {c.hubs[a].id, "hub-gone"}}
		h.view.mu.Unlock()
	}
	_, _, missing := listEvents(t, c.hubs[a], moved[0], from, to, 10_000)
	if !slices.Equal(missing, []string{"hub-gone"}) {
		t.Fatalf("missing_hubs %v, want [hub-gone]", missing)
	}
	c.hubs[a].down.Store(true)
	got, _, missing := listEvents(t, c.hubs[b], moved[0], from, to, 10_000)
	if want := slices.Sorted(slices.Values([]string{c.hubs[a].id, "hub-gone"})); !slices.Equal(missing, want) || len(got) != 20 {
		t.Fatalf("with %s down: %d events, missing_hubs %v; want 20 and %v", c.hubs[a].id, len(got), missing, want)
	}
	c.hubs[a].down.Store(false)
}
