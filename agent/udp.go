package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"time"

	"edgeflow/internal/lograte"
)

// maxDatagram is the largest UDP payload (IPv4's limit).
const maxDatagram = 65535

// serveUDP reads line-protocol datagrams until the socket is closed. Each
// datagram's good lines are stored in one append that does not wait for a
// sync (fire and forget); bad lines are counted and logged at most once per
// LogEvery with how many were suppressed.
func (a *Agent) serveUDP(ctx context.Context) {
	buf := make([]byte, maxDatagram)
	bad := lograte.Limiter{Every: a.opts.LogEvery}
	failed := lograte.Limiter{Every: a.opts.LogEvery}
	for {
		n, from, err := a.udpConn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			a.log.Warn("agent: udp read", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		st := a.clock.Stamp()
		var recs [][]byte
		for i, line := range bytes.Split(buf[:n], []byte{'\n'}) {
			p, skipped, err := parseLineProtocol(line)
			a.m.udpSkipped.Add(uint64(skipped))
			var lineRecs [][]byte
			if err == nil {
				for j := range p {
					p[j].line = i + 1
				}
				// Stamped and checked as the hub will check them: a line
				// the hub would refuse is refused here, whole.
				lineRecs, err = encodePoints(p, st)
			}
			if err != nil {
				a.m.udpBadLines.Add(1)
				a.m.countRefused(sourceUDP, err)
				if ok, supp := bad.Allow(time.Now()); ok {
					a.log.Warn("agent: line-protocol line refused", "from", from.String(), "line", i+1, "reason", refusalReason(err),
						"err", err, "text", truncate(line, 120), "suppressed", supp)
				}
				continue
			}
			recs = append(recs, lineRecs...)
		}
		if len(recs) == 0 {
			continue
		}
		if _, err := a.st.Append(ctx, recs); err != nil {
			a.m.udpAppendErrors.Add(1)
			if ok, supp := failed.Allow(time.Now()); ok {
				a.log.Warn("agent: udp events not stored", "events", len(recs), "err", err, "suppressed", supp)
			}
			continue
		}
		a.m.udpEvents.Add(uint64(len(recs)))
		a.up.Notify()
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
