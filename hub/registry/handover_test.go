package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"edgeflow/hub/hubapi"
	"edgeflow/wire"
)

// randomRegistry returns a registry of n devices with random streams,
// ranges, clocks and statuses.
func randomRegistry(t testing.TB, rng *rand.Rand, n int) *Registry {
	t.Helper()
	r := New(8)
	for i := range n {
		d := &deviceState{LastSeenNs: rng.Int64N(1e18), StatusKnown: rng.IntN(2) == 0, Online: rng.IntN(2) == 0,
			Version: fmt.Sprintf("v%d", rng.IntN(9)), Connection: rng.Uint64N(5),
			Backlog:  hubapi.Backlog{Events: rng.Uint64N(100), Bytes: rng.Uint64N(1e6)},
			HubClock: &clockState{OffsetNs: rng.Int64N(1e9), UncertaintyNs: rng.Int64N(1e6), Method: 3},
			Streams:  map[string]*streamInfo{}}
		for range rng.IntN(3) {
			var id wire.StreamID
			for k := range id {
				id[k] = byte(rng.UintN(256))
			}
			s := &streamInfo{Batches: rng.Uint64N(50), LastServerNs: rng.Int64N(1e18)}
			at := uint64(1)
			for range rng.IntN(4) {
				lo := at + rng.Uint64N(10)
				hi := lo + rng.Uint64N(20)
				s.Applied.Add(lo, hi)
				at = hi + 2
			}
			s.addGap(at+1, at+1+rng.Uint64N(5), "max_bytes")
			d.Streams[id.String()] = s
		}
		r.devices[fmt.Sprintf("dev-%04d", i)] = d
	}
	return r
}

func partitionOf(device string, parts uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(device))
	return h.Sum32() % parts
}

// TestRegistryHandoverSplitMerge splits a registry by a random partition
// function into two through Export, Import and Drop, and checks that the
// two answer for every device exactly as the whole did, and that moving
// the devices back restores the same checkpoint bytes.
func TestRegistryHandoverSplitMerge(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		a := randomRegistry(t, rng, 1+rng.IntN(60))
		want := a.List()
		whole, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		parts, mine := uint32(1+rng.IntN(8)), uint32(0)
		mine = uint32(rng.IntN(int(parts)))
		moving := func(dev string) bool { return partitionOf(dev, parts) == mine }
		data, err := a.ExportDevices(moving)
		if err != nil {
			t.Fatal(err)
		}
		b := New(8)
		if err := b.ImportDevices(data); err != nil {
			t.Fatalf("seed %d: import: %v", seed, err)
		}
		if err := b.ImportDevices(data); err == nil || !strings.Contains(err.Error(), "already held") {
			t.Fatalf("seed %d: second import: %v, want a refusal naming the device", seed, err)
		}
		dropped := a.DropDevices(moving)
		all, _ := b.Counts()
		if dropped != all {
			t.Fatalf("seed %d: dropped %d, imported %d", seed, dropped, all)
		}
		for _, w := range want {
			src := a
			if moving(w.ID) {
				src = b
				if _, ok := a.Get(w.ID); ok {
					t.Fatalf("seed %d: %s still answered by the giving registry", seed, w.ID)
				}
			} else if _, ok := b.Get(w.ID); ok {
				t.Fatalf("seed %d: %s answered by the taking registry", seed, w.ID)
			}
			got, ok := src.Get(w.ID)
			if !ok || !reflect.DeepEqual(got, w) {
				t.Fatalf("seed %d: %s after handover:\n%+v\nwant\n%+v", seed, w.ID, got, w)
			}
		}
		// Back again: the whole registry's checkpoint, byte for byte.
		back, err := b.ExportDevices(func(string) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		if err := a.ImportDevices(back); err != nil {
			t.Fatal(err)
		}
		again, _ := a.Snapshot()
		if !bytes.Equal(again, whole) {
			t.Fatalf("seed %d: snapshot after the round trip differs", seed)
		}
	}
}

// TestRegistryHandoverBadInput: every corruption is a clear error and
// leaves the registry as it was.
func TestRegistryHandoverBadInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := randomRegistry(t, rng, 5)
	good, err := a.ExportDevices(func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	body := func(v any) []byte {
		j, _ := json.Marshal(v)
		out := append([]byte(handoverMagic), handoverVersion, byte(len(j)))
		return append(out, j...)
	}
	cases := map[string][]byte{
		"empty":       nil,
		"magic":       []byte("XXXXXX\x01\x00"),
		"version":     append([]byte(handoverMagic), 9, 0),
		"truncated":   good[:len(good)-3],
		"trailing":    append(bytes.Clone(good), '}'),
		"huge length": append([]byte(handoverMagic), 1, 0xff, 0xff, 0xff, 0xff, 0x7f),
		"bad device":  body(map[string]any{"bad/id": map[string]any{}}),
		"null device": body(map[string]any{"d1": nil}),
		"bad stream":  body(map[string]any{"d1": map[string]any{"streams": map[string]any{"xyz": map[string]any{}}}}),
	}
	for name, in := range cases {
		b := New(8)
		if err := b.ImportDevices(in); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "bad device handover") {
			t.Errorf("%s: %v", name, err)
		}
		if n, _ := b.Counts(); n != 0 {
			t.Errorf("%s: registry changed", name)
		}
	}
}

// FuzzRegistryImportDevices: no input makes ImportDevices panic, and what
// it accepts exports again to an input it accepts.
func FuzzRegistryImportDevices(f *testing.F) {
	a := randomRegistry(f, rand.New(rand.NewPCG(3, 4)), 3)
	good, _ := a.ExportDevices(func(string) bool { return true })
	f.Add(good)
	f.Add([]byte(handoverMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := New(8)
		if err := r.ImportDevices(data); err != nil {
			return
		}
		out, err := r.ExportDevices(func(string) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		if err := New(8).ImportDevices(out); err != nil {
			t.Fatalf("re-export refused: %v", err)
		}
	})
}
