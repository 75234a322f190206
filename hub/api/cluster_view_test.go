package api

import (
	"slices"
	"testing"

	"edgeflow/hub/hubapi"
)

// fixedView is a Cluster whose members never change.
type fixedView struct {
	self    string
	n       int
	members []Member
}

func (v fixedView) Self() string                 { return v.self }
func (v fixedView) Members() []Member            { return v.members }
func (v fixedView) Partitions() int              { return v.n }
func (v fixedView) PartitionOf(string) int       { return 0 }
func (v fixedView) Status() hubapi.ClusterStatus { return hubapi.ClusterStatus{} }
func (v fixedView) HistoryHolders(int) []string  { return nil }

// TestReadView: a partition two hubs claim goes to the higher epoch, a
// tie leaves it without owner, claims outside the partition count are
// ignored; an answer is accepted only for partitions the view gives its
// hub at those epochs and not covered yet.
func TestReadView(t *testing.T) {
	s := &API{cfg: Config{Cluster: fixedView{self: "b", n: 4, members: []Member{
		{ID: "a", Owned: map[int]uint64{0: 5, 1: 3, 2: 7, 9: 1}},
		{ID: "b", Owned: map[int]uint64{1: 4, 2: 7, -1: 2}},
	}}}}
	v := s.readView()
	if v.self != 1 || !slices.Equal(v.owner, []int{0, 1, -1, -1}) || !slices.Equal(v.epoch, []uint64{5, 4, 7, 0}) {
		t.Fatalf("self %d owners %v epochs %v", v.self, v.owner, v.epoch)
	}
	covered := make([]bool, 4)
	for _, tc := range []struct {
		m       int
		claimed map[int]uint64
		want    bool
	}{
		{0, map[int]uint64{0: 5}, true},
		{0, map[int]uint64{0: 4}, false},       // stale epoch
		{0, map[int]uint64{0: 5, 1: 3}, false}, // partition 1 is b's now
		{1, map[int]uint64{1: 4}, true},
		{1, map[int]uint64{2: 7}, false}, // a tie: nobody's
		{1, map[int]uint64{7: 1}, false}, // no such partition
		{1, map[int]uint64{}, true},
	} {
		if got := v.accepts(tc.m, tc.claimed, covered); got != tc.want {
			t.Errorf("member %d claiming %v: accepted %v, want %v", tc.m, tc.claimed, got, tc.want)
		}
	}
	covered[0] = true
	if v.accepts(0, map[int]uint64{0: 5}, covered) {
		t.Error("an answer for a partition already covered was accepted")
	}
}
