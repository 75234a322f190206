package aggregate

import "fmt"

// ring keeps the last cap items of a sequence numbered by offset
// (0, 1, 2, ...); item off lives in slot off % cap. Readers resume by
// offset.
type ring[T any] struct {
	buf  []T
	n    int    // items held
	next uint64 // offset of the next item appended
}

func newRing[T any](capacity int) ring[T] { return ring[T]{buf: make([]T, capacity)} }

func (r *ring[T]) push(v T) {
	r.buf[r.next%uint64(len(r.buf))] = v
	r.next++
	r.n = min(r.n+1, len(r.buf))
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
	for _, v := range items {
		r.push(v)
	}
}
