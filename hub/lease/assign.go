package lease

import (
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// Assign is the target owner of each partition (index) among members:
// rendezvous hashing with a bounded load, so every member gets at most
// ceil(partitions/len(members)) partitions and a member joining or
// leaving moves few others. It is a pure function of the member set
// (order and duplicates do not matter), so every hub that sees the same
// members computes the same assignment. No members: every entry is "".
func Assign(members []string, partitions int) []string {
	out := make([]string, max(partitions, 0))
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if len(ms) == 0 {
		return out
	}
	limit := (partitions + len(ms) - 1) / len(ms)
	load := make(map[string]int, len(ms))
	ranked := make([]string, len(ms))
	for p := range out {
		copy(ranked, ms)
		slices.SortFunc(ranked, func(a, b string) int {
			ha, hb := score(a, p), score(b, p)
			switch {
			case ha > hb:
				return -1
			case ha < hb:
				return 1
			}
			return strings.Compare(a, b)
		})
		for _, m := range ranked {
			if load[m] < limit {
				out[p] = m
				load[m]++
				break
			}
		}
	}
	return out
}

// score is member m's rendezvous weight for partition p.
func score(m string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(m))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(p)))
	x := h.Sum64()
	// A finalizer (splitmix64) so near-equal inputs spread.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
