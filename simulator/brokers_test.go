package simulator

import (
	"slices"
	"testing"
)

// TestBrokersForSpreadsDevices checks that with several brokers device i
// starts at the (i mod n)th and keeps every other one, in order, for
// failover, and that one broker is every device's only one.
func TestBrokersForSpreadsDevices(t *testing.T) {
	f := &Fleet{opts: Options{Brokers: []string{"tcp://a:1", "tcp://b:1", "tcp://c:1"}}}
	want := [][]string{
		{"tcp://a:1", "tcp://b:1", "tcp://c:1"},
		{"tcp://b:1", "tcp://c:1", "tcp://a:1"},
		{"tcp://c:1", "tcp://a:1", "tcp://b:1"},
		{"tcp://a:1", "tcp://b:1", "tcp://c:1"},
	}
	for i, w := range want {
		if got := f.brokersFor(i); !slices.Equal(got, w) {
			t.Errorf("device %d: %v, want %v", i, got, w)
		}
	}
	if got := f.brokersFor(1); &got[0] == &f.opts.Brokers[1] {
		t.Error("brokersFor shares Options.Brokers' array")
	}
	one := &Fleet{opts: Options{Brokers: []string{"tcp://a:1"}}}
	if got := one.brokersFor(7); !slices.Equal(got, []string{"tcp://a:1"}) {
		t.Errorf("one broker: %v", got)
	}
}
