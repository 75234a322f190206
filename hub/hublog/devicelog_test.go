package hublog

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// TestExpiredDeviceLogKeysResumes walks the device log index a few keys
// per call, as retention does: every expired key (old enough and covered
// by the checkpoint position) comes back once, across devices whose ids
// are prefixes of each other, and nothing that is kept.
func TestExpiredDeviceLogKeysResumes(t *testing.T) {
	st, err := OpenStore(t.TempDir(), false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const cutoff, pos = 100, 50
	var want []string
	seq := uint64(0)
	err = st.DB.Update(func(txn *badger.Txn) error {
		for _, dev := range []string{"a", "a1", "b", "c"} {
			for _, ts := range []int64{10, 20, 30, 150, 200} {
				seq++
				if dev == "b" && ts == 30 {
					seq = 60 // beyond the checkpoint: kept, and so is what follows
				}
				k := DeviceLogKey(dev, ts, seq)
				if ts < cutoff && seq <= pos {
					want = append(want, fmt.Sprintf("%s/%d/%d", dev, ts, seq))
				}
				if err := txn.Set(k, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var from []byte
	for calls := 0; ; calls++ {
		if calls > 100 {
			t.Fatal("no end to the walk")
		}
		keys, next, err := st.ExpiredDeviceLogKeys(cutoff, pos, from, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			dev, ts, seq, err := ParseDeviceLogKey(k)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s/%d/%d", dev, ts, seq))
		}
		if next == nil {
			break
		}
		from = next
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("expired keys\n got %v\nwant %v", got, want)
	}
}
