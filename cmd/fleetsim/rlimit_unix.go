//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit, and says
// clearly when even that is below need (one MQTT connection per device,
// plus Badger's files).
func raiseFileLimit(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open-file limit: %w", err)
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return lim.Cur, fmt.Errorf("raise the open-file limit from %d to %d: %w", lim.Cur, lim.Max, err)
		}
		lim = want
	}
	if lim.Cur < need {
		return lim.Cur, fmt.Errorf("open-file limit is %d but this fleet needs about %d descriptors "+
			"(one MQTT connection per device): raise the hard limit (ulimit -Hn, or LimitNOFILE= in a systemd unit) "+
			"or run fewer devices; hubd needs as many", lim.Cur, need)
	}
	return lim.Cur, nil
}
