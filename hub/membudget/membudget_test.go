package membudget

import (
	"testing"

	"edgeflow/internal/bytesize"
)

// TestDeriveServerKeepsDefaults checks that the server budget gives the
// sizes the hub and Badger used before there was a budget, so a hub that
// sets nothing behaves as it did.
func TestDeriveServerKeepsDefaults(t *testing.T) {
	s, err := Derive(ServerLimit)
	if err != nil {
		t.Fatal(err)
	}
	want := Sizes{Limit: ServerLimit, GoMemoryLimit: ServerLimit - ServerLimit/8,
		BadgerMemTable: 64 << 20, BadgerMemTables: 5, BadgerBlockCache: 256 << 20, BadgerValueLogFile: 1<<30 - 1,
		ApplyLag: 16 << 20, MaxGroupBytes: 32 << 20, MaxGroupBatches: 512, QueueLen: 64, ClientQueue: 1024,
		StreamBuffer: 1 << 16}
	if s != want {
		t.Errorf("Derive(server) = %+v\nwant %+v", s, want)
	}
}

// TestDeriveWithinBudget checks, for budgets from the minimum up, that what
// the budget bounds in bytes (memtables, caches, apply lag, a group, the
// engine's caps at their assumed costs) adds up to less than the budget,
// and that every size is positive and grows with the budget.
func TestDeriveWithinBudget(t *testing.T) {
	var prev Sizes
	for _, lim := range []int64{MinLimit, 96 << 20, SmallLimit, 256 << 20, 512 << 20, 768 << 20} {
		s, err := Derive(lim)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, c := range s.Components() {
			switch c.Name {
			case "go_memory_limit", "badger_value_log_file": // a limit, and file-backed pages
			default:
				sum += c.Bytes
			}
		}
		if sum >= lim {
			t.Errorf("Derive(%d): components sum to %d, not within the budget", lim, sum)
		}
		if s.GoMemoryLimit >= lim || s.GoMemoryLimit <= 0 {
			t.Errorf("Derive(%d): Go memory limit %d", lim, s.GoMemoryLimit)
		}
		for name, v := range map[string]int64{"memtable": s.BadgerMemTable, "memtables": int64(s.BadgerMemTables),
			"apply lag": s.ApplyLag, "group batches": int64(s.MaxGroupBatches), "queue": int64(s.QueueLen), "client queue": int64(s.ClientQueue),
			"query cache": int64(s.QueryCachePartials), "pending": int64(s.MaxPending), "ring": int64(s.StreamBuffer)} {
			if v <= 0 {
				t.Errorf("Derive(%d): %s %d", lim, name, v)
			}
		}
		if prev.Limit != 0 && (s.BadgerMemTable < prev.BadgerMemTable || s.ApplyLag < prev.ApplyLag ||
			s.QueryCachePartials < prev.QueryCachePartials || s.QueueLen < prev.QueueLen) {
			t.Errorf("Derive(%d) = %+v: smaller than at %d: %+v", lim, s, prev.Limit, prev)
		}
		prev = s
	}
}

// TestParseLimit covers the names, byte counts and refusals.
func TestParseLimit(t *testing.T) {
	for in, want := range map[string]int64{"server": ServerLimit, "Small": SmallLimit, "256MiB": 256 << 20, "1GiB": 1 << 30} {
		if got, err := ParseLimit(in); err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "tiny", "32MiB", "-1", "2048GiB", "12XB"} {
		if got, err := ParseLimit(in); err == nil {
			t.Errorf("ParseLimit(%q) = %d, want an error", in, got)
		}
	}
	if _, err := Derive(MinLimit - 1); err == nil {
		t.Error("Derive below MinLimit: no error")
	}
}

// TestLogAttrsReadBack checks that the start line's byte counts parse back
// to the sizes (an operator copies them into a config).
func TestLogAttrsReadBack(t *testing.T) {
	s, err := Derive(256 << 20)
	if err != nil {
		t.Fatal(err)
	}
	a := s.LogAttrs()
	got := map[string]any{}
	for i := 0; i+1 < len(a); i += 2 {
		got[a[i].(string)] = a[i+1]
	}
	for key, want := range map[string]int64{"memory_limit": s.Limit, "badger_memtable": s.BadgerMemTable, "apply_lag": s.ApplyLag} {
		str, ok := got[key].(string)
		if !ok {
			t.Fatalf("%s missing from %v", key, a)
		}
		if n, err := bytesize.Parse(str); err != nil || n != want {
			t.Errorf("%s = %q reads back as %d, %v; want %d", key, str, n, err, want)
		}
	}
}
