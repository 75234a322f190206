//go:build linux

package buffer

import (
	"math"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// statFreeSpace reports the bytes an unprivileged process can still write
// on the filesystem holding path (statfs f_bavail): what Badger's mapped
// files can still grow into before a write to them faults with SIGBUS.
func statFreeSpace(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	if unit != 0 && uint64(st.Bavail) > math.MaxInt64/unit {
		return math.MaxInt64, nil
	}
	return int64(uint64(st.Bavail) * unit), nil
}

// allocatedBytes is the disk space a file occupies, which for Badger's
// sparse, preallocated logs is far less than its size.
func allocatedBytes(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
