package clockest

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

type clockObsAt struct {
	dev        string
	send, recv time.Time
}

// randomObservations returns n batches over devs devices: offsets, delays
// and a clock step now and then.
func randomObservations(rng *rand.Rand, devs, n int) []clockObsAt {
	offsets := make([]time.Duration, devs)
	for i := range offsets {
		offsets[i] = time.Duration(rng.Int64N(int64(10 * time.Second)))
	}
	at := time.Unix(1_700_000_000, 0)
	out := make([]clockObsAt, n)
	for i := range out {
		d := rng.IntN(devs)
		if rng.IntN(50) == 0 {
			offsets[d] += 5 * time.Second // a step
		}
		at = at.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
		delay := time.Duration(rng.Int64N(int64(200 * time.Millisecond)))
		out[i] = clockObsAt{fmt.Sprintf("d%03d", d), at.Add(-offsets[d]).Add(-delay), at}
	}
	return out
}

func partOf(dev string, parts uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(dev))
	return h.Sum32() % parts
}

func estimates(c *DeviceClocks, devs int) map[string][3]int64 {
	out := map[string][3]int64{}
	for i := range devs {
		dev := fmt.Sprintf("d%03d", i)
		if off, unc, ok := c.Estimate(dev); ok {
			out[dev] = [3]int64{int64(off), int64(unc), 1}
		}
	}
	return out
}

// TestClockHandoverSplitMerge feeds one estimator random batches, hands a
// random partition's devices to a second one (Export, Import, Drop), then
// feeds both the rest of the batches, each its own devices: every
// device's estimate, at the handover and at the end, equals the
// estimate of one estimator that saw everything.
func TestClockHandoverSplitMerge(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		devs := 1 + rng.IntN(40)
		obs := randomObservations(rng, devs, 2000)
		cut := rng.IntN(len(obs))
		opts := DeviceClocksOptions{StepSpan: 30 * time.Second}
		whole, _ := NewDeviceClocks(opts)
		a, _ := NewDeviceClocks(opts)
		b, _ := NewDeviceClocks(opts)
		for _, o := range obs[:cut] {
			whole.Observe(o.dev, o.send, o.recv)
			a.Observe(o.dev, o.send, o.recv)
		}
		parts := uint32(1 + rng.IntN(6))
		mine := uint32(rng.IntN(int(parts)))
		moving := func(dev string) bool { return partOf(dev, parts) == mine }
		data, err := a.ExportDevices(moving)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ImportDevices(data); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if err := b.ImportDevices(data); b.Len() > 0 && (err == nil || !strings.Contains(err.Error(), "already tracked")) {
			t.Fatalf("seed %d: second import: %v", seed, err)
		}
		if n := a.DropDevices(moving); n != b.Len() {
			t.Fatalf("seed %d: dropped %d, imported %d", seed, n, b.Len())
		}
		check := func(when string) {
			want := estimates(whole, devs)
			ga, gb := estimates(a, devs), estimates(b, devs)
			for dev, w := range want {
				got, other := ga[dev], gb[dev]
				if moving(dev) {
					got, other = other, got
				}
				if got != w || other != [3]int64{} {
					t.Fatalf("seed %d %s: %s estimate %v (other hub %v), want %v", seed, when, dev, got, other, w)
				}
			}
		}
		check("at handover")
		for _, o := range obs[cut:] {
			whole.Observe(o.dev, o.send, o.recv)
			if moving(o.dev) {
				b.Observe(o.dev, o.send, o.recv)
			} else {
				a.Observe(o.dev, o.send, o.recv)
			}
		}
		check("at the end")
		// Export is deterministic: the same state gives the same bytes.
		e1, _ := whole.ExportDevices(moving)
		back, _ := NewDeviceClocks(opts)
		_ = back.ImportDevices(e1)
		e2, _ := back.ExportDevices(func(string) bool { return true })
		if !bytes.Equal(e1, e2) {
			t.Fatalf("seed %d: export after a round trip differs", seed)
		}
	}
}

func TestClockHandoverBadInput(t *testing.T) {
	c, _ := NewDeviceClocks(DeviceClocksOptions{})
	for _, o := range randomObservations(rand.New(rand.NewPCG(1, 1)), 3, 50) {
		c.Observe(o.dev, o.send, o.recv)
	}
	good, _ := c.ExportDevices(func(string) bool { return true })
	cases := map[string][]byte{
		"empty":     nil,
		"magic":     []byte("XXXXXX\x01\x00"),
		"version":   append([]byte(handoverMagic), 7, 0),
		"truncated": good[:len(good)-1],
		"trailing":  append(bytes.Clone(good), 0),
		"count":     append([]byte(handoverMagic), 1, 0xff, 0xff, 0x7f),
		"twice":     append(append([]byte(handoverMagic), 1, 2), append(bytes.Repeat([]byte{1, 'a', 0, 0, 0, 0, 0, 0}, 2), 0)...),
	}
	for name, in := range cases {
		d, _ := NewDeviceClocks(DeviceClocksOptions{})
		if err := d.ImportDevices(in); err == nil || !strings.Contains(err.Error(), "bad device handover") {
			t.Errorf("%s: %v", name, err)
		}
		if d.Len() != 0 {
			t.Errorf("%s: estimator changed", name)
		}
	}
}

// FuzzClockImportDevices: no input makes ImportDevices panic, and what it
// accepts exports and imports again.
func FuzzClockImportDevices(f *testing.F) {
	c, _ := NewDeviceClocks(DeviceClocksOptions{})
	for _, o := range randomObservations(rand.New(rand.NewPCG(2, 2)), 3, 40) {
		c.Observe(o.dev, o.send, o.recv)
	}
	good, _ := c.ExportDevices(func(string) bool { return true })
	f.Add(good)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, _ := NewDeviceClocks(DeviceClocksOptions{})
		if err := d.ImportDevices(data); err != nil {
			return
		}
		for id := range d.devices {
			d.Estimate(id)
		}
		out, _ := d.ExportDevices(func(string) bool { return true })
		e, _ := NewDeviceClocks(DeviceClocksOptions{})
		if err := e.ImportDevices(out); err != nil {
			t.Fatalf("re-export refused: %v", err)
		}
	})
}
