package aggregate

import "fmt"

// ring keeps the last cap items of a sequence numbered by offset
// (0, 1, 2, ...); item off lives in slot off % cap. Readers resume by
// offset.
type ring[T any] struct {
	buf  []T
	n    int    // items held
	w    int    // slot of the next item: next % len(buf), kept without a division
	next uint64 // offset of the next item appended
}

func newRing[T any](capacity int) ring[T] { return ring[T]{buf: make([]T, capacity)} }

func (r *ring[T]) push(v T) {
	r.buf[r.w] = v
	if r.w++; r.w == len(r.buf) {
		r.w = 0
	}
	r.next++
	if r.n < len(r.buf) {
		r.n++
	}
}

// skip advances the ring by k items without writing them, as k pushes
// would; the caller pushes at least len(buf) items next, so the slots it
// leaves stale are overwritten before anyone reads them.
func (r *ring[T]) skip(k int) {
	r.next += uint64(k)
	r.w = int((uint64(r.w) + uint64(k)) % uint64(len(r.buf)))
	r.n = min(r.n+k, len(r.buf))
}

// oldest is the smallest offset still held.
func (r *ring[T]) oldest() uint64 { return r.next - uint64(r.n) }

// read calls fn for items from offset from, at most n; it returns the
// offset after the last item read.
func (r *ring[T]) read(from uint64, n int, fn func(off uint64, v *T)) (uint64, error) {
	if from < r.oldest() {
		return r.oldest(), fmt.Errorf("%w: offset %d, oldest held is %d", ErrOffsetTooOld, from, r.oldest())
	}
	off := from
	for ; off < r.next && n > 0; off, n = off+1, n-1 {
		fn(off, &r.buf[off%uint64(len(r.buf))])
	}
	return max(off, from), nil
}

// all returns the held items in offset order (for snapshots).
func (r *ring[T]) all() []T {
	out := make([]T, 0, r.n)
	_, _ = r.read(r.oldest(), r.n, func(_ uint64, v *T) { out = append(out, *v) })
	return out
}

// restore refills the ring with items ending just before offset next.
func (r *ring[T]) restore(items []T, next uint64) {
	if len(items) > len(r.buf) {
		items = items[len(items)-len(r.buf):]
	}
	r.n = 0
	r.next = next - uint64(len(items))
	r.w = int(r.next % uint64(len(r.buf)))
	for _, v := range items {
		r.push(v)
	}
}
