package aggregate

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"

	"edgeflow/internal/cputime"
)

// attrBenchFleet is 1,000 devices sending one event a second in batches
// of a minute; with the join on, each device's 10 attributes get a new
// version once an hour of event time (staggered over the hour, on bucket
// boundaries), written as the hub's applier writes them: the table's Put,
// then ReviseDevice.
type attrBenchFleet struct {
	batches []*Batch
	tab     *memAttrs
	next    []int64 // per device: event time of its next version
	gen     []int
}

const attrBenchDevices = 1000

func newAttrBenchFleet() *attrBenchFleet {
	f := &attrBenchFleet{tab: &memAttrs{dev: map[string][]AttrVersion{}}}
	for d := 0; d < attrBenchDevices; d++ {
		b := &Batch{Device: "dev-" + strconv.Itoa(d), Stream: sid(d), ServerTime: at(time.Minute)}
		for i := 0; i < 60; i++ {
			b.Events = append(b.Events, Event{Seq: uint64(i + 1), Metric: "temp", Value: float64(i%97) + 0.5, Time: at(time.Duration(i) * time.Second)})
		}
		f.batches = append(f.batches, b)
		stagger := time.Duration(d*36/10) * time.Second / 10 * 10 // d * 3.6 s, on a 10 s boundary
		f.next = append(f.next, at(stagger))
		f.gen = append(f.gen, 0)
	}
	return f
}

// version writes device d's next version when its events reach it.
func (f *attrBenchFleet) version(e *Engine, d int, b *Batch) int {
	last := b.Events[len(b.Events)-1].Time
	n := 0
	for f.next[d] <= last {
		attrs := make(map[string]string, 10)
		for k := 0; k < 10; k++ {
			attrs["k"+strconv.Itoa(k)] = fmt.Sprint("v", f.gen[d]%3, "-", k)
		}
		attrs["site"] = "site-" + strconv.Itoa((d+f.gen[d])%20)
		v := AttrVersion{From: f.next[d], Attrs: attrs}
		f.tab.put(b.Device, v)
		e.ReviseDevice(b.Device, v, v.From, math.MaxInt64, 0)
		f.gen[d]++
		f.next[d] += int64(time.Hour)
		n++
	}
	return n
}

func (f *attrBenchFleet) shift(b *Batch) {
	b.ServerTime += int64(time.Minute)
	for i := range b.Events {
		b.Events[i].Time += int64(time.Minute)
		b.Events[i].Seq += 60
	}
}

// BenchmarkAttrIngest measures engine events/s with the attribute join
// off and on (1,000 devices, 10 attributes each, a version per device per
// hour of event time). The join itself is done at query time, so "on"
// costs the versions' Put and ReviseDevice on the apply path.
func BenchmarkAttrIngest(b *testing.B) {
	for _, join := range []bool{false, true} {
		b.Run(fmt.Sprintf("join=%v", join), func(b *testing.B) {
			opt := benchOptions()
			opt.DisableMergedStream = true
			e := newEngine(b, opt)
			f := newAttrBenchFleet()
			if join {
				e.SetAttrSource(f.tab)
			}
			for _, bt := range f.batches { // warm up: create the series
				mustApply(b, e, bt)
				f.shift(bt)
			}
			b.ReportAllocs()
			b.ResetTimer()
			events, versions := 0, 0
			for i := 0; events < b.N; i++ {
				d := i % len(f.batches)
				bt := f.batches[d]
				if join {
					versions += f.version(e, d, bt)
				}
				mustApply(b, e, bt)
				f.shift(bt)
				events += len(bt.Events)
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(versions), "versions")
		})
	}
}

// BenchmarkAttrQuery measures the query-time cost of the attribute join:
// 1,000 devices with two hours of one event every 10 s each, sent in time
// order in batches of five minutes (one live partial per bucket, none
// late: 720,000 partials), 10 attributes per device and a
// new version per device per hour (staggered, on bucket boundaries), and a
// query of 1m tumbling windows over the two hours grouped by attr.site
// (20 sites), by the tag zone (20 values: the same groups' shape without
// the join) and by device (1,000 groups). Each iteration runs every query
// once, after a collection (not timed) so none pays for another's
// garbage, and the figures share the machine's load; cost-vs-* is how much
// longer the join's query took, in wall time and in the process's CPU
// time (steadier on a shared machine).
func BenchmarkAttrQuery(b *testing.B) {
	const hours = 2
	opt := benchOptions()
	opt.DisableMergedStream = true
	opt.EvictAfter = 48 * time.Hour
	opt.MaxQueryResults = 1 << 20 // group_by=device: 120,000 windows
	opt.TagKeys = []string{"zone"}
	opt.AllowedLateness = 10 * time.Minute // a batch's window (5 minutes) with room: none late
	e := newEngine(b, opt)
	tab := &memAttrs{dev: map[string][]AttrVersion{}}
	e.SetAttrSource(tab)
	for d := 0; d < attrBenchDevices; d++ {
		dev := "dev-" + strconv.Itoa(d)
		stagger := time.Duration(d*36/10) * time.Second / 10 * 10 // d * 3.6 s, on a 10 s boundary
		for h := -1; h < hours; h++ {
			attrs := make(map[string]string, 10)
			for k := 0; k < 9; k++ {
				attrs["k"+strconv.Itoa(k)] = fmt.Sprint("v", (h+1)%3, "-", k)
			}
			attrs["site"] = "site-" + strconv.Itoa((d+h+1)%20)
			tab.put(dev, AttrVersion{From: at(time.Duration(h)*time.Hour + stagger), Attrs: attrs})
		}
	}
	// Five minutes a batch, devices taking turns: events arrive in time
	// order, none late.
	for m := 0; m < hours*12; m++ {
		for d := 0; d < attrBenchDevices; d++ {
			bt := &Batch{Device: "dev-" + strconv.Itoa(d), Stream: sid(d), ServerTime: at(time.Duration(m+1) * 5 * time.Minute)}
			zone := []Tag{{"zone", "zone-" + strconv.Itoa(d%20)}}
			for s := 0; s < 30; s++ {
				bt.Events = append(bt.Events, Event{Seq: uint64(m*30 + s + 1), Metric: "temp", Value: float64((s+d)%97) + 0.5,
					Time: at(time.Duration(m)*5*time.Minute + time.Duration(s)*10*time.Second), Tags: zone})
			}
			mustApply(b, e, bt)
		}
	}
	if st := e.Stats(); st.Late+st.TooLate != 0 {
		b.Fatalf("%d late events, %d too late", st.Late, st.TooLate)
	}
	aggs := AggCount | AggSum | AggMin | AggMax | AggAvg
	queries := []struct {
		name    string
		groupBy []string
	}{{"attr.site", []string{"attr.site"}}, {"zone", []string{"zone"}}, {"device", []string{"device"}}}
	var took, cpu [3]time.Duration
	var windows [3]int
	run := func(i int) {
		q := Query{Metric: "temp", Window: WindowSpec{Kind: Tumbling, Size: time.Minute}, From: t0, To: t0.Add(hours * time.Hour),
			Aggs: aggs, GroupBy: queries[i].groupBy}
		b.StopTimer()
		runtime.GC() // the previous query's garbage is not this one's cost
		b.StartTimer()
		start, cpu0 := time.Now(), cputime.Self()
		ws := mustQuery(b, e, q)
		took[i] += time.Since(start)
		cpu[i] += cputime.Self() - cpu0
		windows[i] = len(ws)
	}
	for i := range queries { // warm up, and check the answers agree
		run(i)
	}
	if windows[0] != 20*hours*60 || windows[1] != 20*hours*60 || windows[2] != attrBenchDevices*hours*60 {
		b.Fatalf("windows: attr.site %d, zone %d, device %d", windows[0], windows[1], windows[2])
	}
	took, cpu = [3]time.Duration{}, [3]time.Duration{}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range queries {
			run(i)
		}
	}
	for i, q := range queries {
		b.ReportMetric(float64(took[i].Microseconds())/float64(b.N)/1000, "ms/query("+q.name+")")
		b.ReportMetric(float64(cpu[i].Microseconds())/float64(b.N)/1000, "cpu-ms/query("+q.name+")")
	}
	b.ReportMetric(100*(float64(took[0])/float64(took[1])-1), "%cost-vs-zone")
	b.ReportMetric(100*(float64(took[0])/float64(took[2])-1), "%cost-vs-device")
	b.ReportMetric(100*(float64(cpu[0])/float64(cpu[1])-1), "%cpu-cost-vs-zone")
	b.ReportMetric(100*(float64(cpu[0])/float64(cpu[2])-1), "%cpu-cost-vs-device")
}
