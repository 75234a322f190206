//go:build linux

package buffer

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// pager hands the resident pages of Badger's memory-mapped files (tables,
// memtable logs, value log) back to the kernel. Badger maps every file it
// writes or reads, so without it every byte the store holds on disk ends
// up in the agent's resident set, however rarely it is read again.
//
// It uses madvise(MADV_PAGEOUT): the kernel unmaps the pages and drops the
// clean ones from the page cache; dirty ones stay cached until written
// back, so fsync and msync still see them and durability is unchanged. The
// advice never changes memory contents, which matters because the ranges
// come from /proc/self/maps: Badger may unmap a file and the address be
// reused (by the Go heap) between the read and the call, and MADV_PAGEOUT
// on anonymous memory at most swaps it out. MADV_DONTNEED would zero it.
type pager struct {
	prefix []byte // the store's directory, resolved, with a trailing slash
	slack  int64  // file-backed growth that triggers a pass
	base   int64  // file-backed resident bytes after the last pass
	maps   []byte // reused buffer for /proc/self/maps
}

// newPager returns nil when the kernel cannot page out (before Linux 5.4)
// or dir cannot be resolved; the store then runs without one.
func newPager(dir string, slack int64) *pager {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil || !pageOutSupported() {
		return nil
	}
	return &pager{prefix: []byte(abs + "/"), slack: slack, base: -1}
}

// pageOutSupported probes MADV_PAGEOUT on a private anonymous page.
func pageOutSupported() bool {
	b, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return false
	}
	defer unix.Munmap(b)
	return unix.Madvise(b, unix.MADV_PAGEOUT) == nil
}

// maybePageOut runs a pass when the process's file-backed resident memory
// has grown by more than the slack since the last one; reading
// /proc/self/statm costs far less than a pass.
func (p *pager) maybePageOut() {
	cur := fileResident()
	if cur < 0 || (p.base >= 0 && cur-p.base < p.slack) {
		return
	}
	p.pageOut()
	p.base = fileResident()
}

// pageOut advises every mapping of a file under the store's directory and
// returns how many it advised.
func (p *pager) pageOut() int {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0
	}
	buf := bytes.NewBuffer(p.maps[:0])
	_, err = buf.ReadFrom(f)
	f.Close()
	p.maps = buf.Bytes()
	if err != nil {
		return 0
	}
	n := 0
	for rest := p.maps; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		start, end, ok := p.mapping(line)
		if !ok {
			continue
		}
		// ENOMEM means the range was unmapped meanwhile; nothing to do.
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_PAGEOUT)
		if errno == 0 {
			n++
		}
	}
	return n
}

// mapping parses one /proc/self/maps line
//
//	start-end perms offset dev inode path
//
// and reports the range when path lies under the store's directory.
func (p *pager) mapping(line []byte) (start, end uintptr, ok bool) {
	i := bytes.IndexByte(line, '/')
	if i < 0 || !bytes.HasPrefix(line[i:], p.prefix) {
		return 0, 0, false
	}
	addr, _, _ := bytes.Cut(line, []byte{' '})
	lo, hi, found := bytes.Cut(addr, []byte{'-'})
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(string(lo), 16, 64)
	e, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}

// fileResident is the process's file-backed (and shared) resident bytes
// from /proc/self/statm, or -1.
func fileResident() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return -1
	}
	n, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return -1
	}
	return n * int64(os.Getpagesize())
}
