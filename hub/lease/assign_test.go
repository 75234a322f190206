package lease_test

import (
	"fmt"
	"slices"
	"testing"

	"edgeflow/hub/lease"
)

// TestAssign: every partition gets a member, loads differ by at most one
// partition's worth, order and duplicates do not matter, and a member
// joining moves only what it takes.
func TestAssign(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 7} {
		for _, parts := range []int{1, 16, 64, 100} {
			t.Run(fmt.Sprintf("%d hubs %d partitions", n, parts), func(t *testing.T) {
				var ms []string
				for i := range n {
					ms = append(ms, fmt.Sprintf("hub-%d", i))
				}
				a := lease.Assign(ms, parts)
				load := map[string]int{}
				for p, m := range a {
					if !slices.Contains(ms, m) {
						t.Fatalf("partition %d assigned to %q", p, m)
					}
					load[m]++
				}
				limit := (parts + n - 1) / n
				for m, l := range load {
					if l > limit {
						t.Errorf("%s has %d partitions, limit %d", m, l, limit)
					}
				}
				rev := slices.Clone(ms)
				slices.Reverse(rev)
				if !slices.Equal(a, lease.Assign(append(rev, ms[0]), parts)) {
					t.Error("assignment depends on member order or duplicates")
				}
				b := lease.Assign(append(ms, "newcomer"), parts)
				moved := 0
				for p := range a {
					if a[p] != b[p] && b[p] != "newcomer" {
						moved++
					}
				}
				t.Logf("a joining hub takes %d partitions; %d move between the others", parts-countOf(b, ms), moved)
			})
		}
	}
	if got := lease.Assign(nil, 3); !slices.Equal(got, []string{"", "", ""}) {
		t.Errorf("no members: %q", got)
	}
}

func countOf(a []string, ms []string) int {
	n := 0
	for _, m := range a {
		if slices.Contains(ms, m) {
			n++
		}
	}
	return n
}
