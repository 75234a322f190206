//go:build !linux

package buffer

import (
	"errors"
	"os"
)

// statFreeSpace is Linux only: elsewhere the store has no free-space guard
// unless Options.FreeSpace supplies one.
func statFreeSpace(string) (int64, error) {
	return 0, errors.ErrUnsupported
}

// allocatedBytes is the file's size where its allocation is not known.
func allocatedBytes(fi os.FileInfo) int64 { return fi.Size() }
