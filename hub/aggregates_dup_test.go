package hub

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"edgeflow/wire/wirepb"
)

// fleetBatch is the batch of device d holding sequences first..last of
// the fleet sendFleet sends (event i at base + i s with sendFleet's value),
// so any range, however it is cut, carries the same events.
func fleetBatch(d *device, base time.Time, first, last uint64) *wirepb.Batch {
	var times []int64
	var vals []float64
	for i := int(first); i <= int(last); i++ {
		times = append(times, base.Add(time.Duration(i)*time.Second).UnixNano())
		vals = append(vals, float64((i*7+len(d.id)*13)%101)-20)
	}
	return timedBatch(d.id, d.stream, first, times, vals)
}

// TestAggregatesIgnoreRedeliveries feeds the same fleet to two hubs: once
// cleanly and in order, and once in shuffled batch order with whole
// batches redelivered and overlapping ranges sent, as an agent retrying
// over a flaky link does. The hub applies each sequence of a stream once,
// so both hubs' /v1/aggregates answers are byte-identical and equal the
// brute force. Windows get an hour of allowed lateness so that the
// shuffled order makes nothing late (late marks depend on arrival order,
// duplicates aside), which keeps revision and late comparable.
func TestAggregatesIgnoreRedeliveries(t *testing.T) {
	const n = 300 // events per device
	opts := func() Options {
		o := aggTestOptions(t, t.TempDir())
		o.Aggregate.AllowedLateness = time.Hour
		return o
	}
	clean, messy := startHub(t, opts()), startHub(t, opts())
	ids := []string{"d1", "d22", "d333"}
	var cleanDevs, messyDevs []*device
	for _, id := range ids {
		c := newDevice(t, "tcp://"+clean.BrokerAddr(), id)
		m := newDevice(t, "tcp://"+messy.BrokerAddr(), id)
		m.stream = c.stream // the same stream on both hubs
		cleanDevs, messyDevs = append(cleanDevs, c), append(messyDevs, m)
	}
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	sent := sendFleet(t, cleanDevs, base, n)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	type job struct {
		d           *device
		first, last uint64
	}
	var jobs []job
	for _, d := range messyDevs {
		for first := uint64(1); first <= n; first += 50 {
			jobs = append(jobs, job{d, first, first + 49})
		}
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	acks := map[wirepb.AckStatus]int{}
	send := func(j job) {
		if j.first > n {
			return
		}
		acks[j.d.send(fleetBatch(j.d, base, j.first, min(j.last, n))).Status]++
	}
	for _, j := range jobs {
		if rng.IntN(3) == 0 { // an overlap into the next batch, before or after it
			send(job{j.d, j.first + 25, j.last + 25})
		}
		send(j)
		if rng.IntN(3) == 0 { // a whole redelivery
			send(j)
		}
	}
	send(jobs[0]) // at least one of each
	send(job{jobs[0].d, jobs[0].first + 10, jobs[0].last - 10})
	if acks[wirepb.AckStatus_ACK_STATUS_DUPLICATE] < 2 || acks[wirepb.AckStatus_ACK_STATUS_REJECTED] != 0 {
		t.Fatalf("acks %v: want duplicates and no rejections", acks)
	}

	waitApplied(t, clean)
	waitApplied(t, messy)
	for _, s := range []*Server{clean, messy} {
		if st := s.Engine().Stats(); st.Events != uint64(len(sent)) {
			t.Fatalf("engine counted %d events, want %d", st.Events, len(sent))
		}
	}
	from, to := base.Add(-time.Hour), base.Add(time.Hour)
	for _, p := range []string{
		aggPath("temp", "tumbling:1m", from, to, "&group_by=device"),
		aggPath("temp", "1m", from, to, ""),
		aggPath("temp", "5m-1m", from, to, "&group_by=device,room"),
		aggPath("temp", "sliding:2m", from, to, ""),
		aggPath("temp", "session:30s", from, to, "&group_by=device"),
	} {
		c1, want := getJSON(t, clean.Handler(), p, nil)
		c2, got := getJSON(t, messy.Handler(), p, nil)
		if c1 != 200 || c2 != 200 || !bytes.Equal(want, got) || !bytes.Contains(want, []byte(`"count":`)) {
			t.Fatalf("%s: answers differ or are empty (status %d, %d):\nclean %s\nmessy %s", p, c1, c2, want, got)
		}
	}
	checkBrute(t, clean.Handler(), sent, base)
	checkBrute(t, messy.Handler(), sent, base)
}
