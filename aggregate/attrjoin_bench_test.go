package aggregate

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"
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
