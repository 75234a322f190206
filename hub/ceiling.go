package hub

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"edgeflow/wire"
)

// The delivery benchmark's ceilings: what end to end would reach if the
// hub's durable store, or its decode, cost less or nothing
// (docs/DELIVERY-PERF.md, "What the store and the decode cost"). They are
// measurement instruments, compiled in only with the build tag ceiling
//
//	go test -tags ceiling ./e2e -run '^$' -bench 'BenchmarkEndToEnd/columns$' -benchtime 4000000x
//
// where HUB_CEILING_STORE (journal, journal-full or none) and
// HUB_CEILING_NODECODE=1 switch them on (ceiling_on.go). In every other
// build ceilingStore and ceilingNoDecode are constants that turn them off,
// and the compiler drops their branches. Never a way to run a hub: "none"
// acks batches it never stored, the journals have no recovery, retention
// or readers, and the journal's file stays open for the process's life.

// checkCeiling refuses an unknown HUB_CEILING_STORE before the hub
// starts, rather than failing its first commit.
func checkCeiling() error {
	switch ceilingStore {
	case "", "journal", "journal-after", "journal-full", "none":
		return nil
	}
	return fmt.Errorf("%w: HUB_CEILING_STORE=%q: want journal, journal-after, journal-full or none", ErrInvalidOptions, ceilingStore)
}

// ceilingJournal is the what-if log of store "journal": each group's
// entries appended to one file with one write and made durable with
// fdatasync, the way a log of the hub's own in front of Badger would.
type ceilingJournal struct {
	f   *os.File
	buf []byte
	// after takes each group's Badger keys under "journal-after", for a
	// goroutine that writes them after the group is acked.
	after chan []kv
}

// ceilingCommit stands in for commit under HUB_CEILING_STORE. It decides
// each pending's fate as commit does. With "journal" it appends the
// group's entries to the journal and fdatasyncs it, then writes Badger's
// small keys (an 8-byte position in place of the entry, the stream's
// ranges, the event-time index keys) unsynced in one transaction: the payloads
// live in the journal alone. With "journal-full" Badger takes what commit
// gives it, entries and all, unsynced: the journal only makes the group
// durable. With "journal-after" Badger's small keys are written by a
// goroutine of their own, in group order, after the group is acked. With
// "none" it stores nothing.
func (c *committer) ceilingCommit(group []*pending) error {
	start := time.Now()
	j := c.ceiling
	if j == nil {
		j = &ceilingJournal{}
		c.ceiling = j
	}
	j.buf = j.buf[:0]
	var kvs []kv
	logged, _ := c.eachEntry(group, func(_ *pending, e []kv) error {
		if ceilingStore == "none" {
			return nil
		}
		j.buf = binary.LittleEndian.AppendUint32(j.buf, uint32(len(e[0].v)))
		j.buf = append(j.buf, e[0].v...)
		if ceilingStore != "journal-full" {
			e[0].v = binary.LittleEndian.AppendUint64(nil, uint64(len(j.buf)))
		}
		kvs = append(kvs, e...)
		return nil
	})
	if logged == 0 {
		return nil
	}
	if ceilingStore != "none" {
		if err := j.append(c.st.dir); err != nil {
			return err
		}
		if ceilingStore == "journal-after" {
			j.writeAfter(c.st, kvs)
		} else if err := ceilingKeys(c.st, kvs); err != nil {
			return err
		}
	}
	c.durable(start, logged)
	return nil
}

// ceilingKeys writes one group's Badger keys in one transaction, unsynced.
func ceilingKeys(st *store, kvs []kv) error {
	txn := st.db.NewTransaction(true)
	defer txn.Discard()
	if err := setAll(txn, kvs); err != nil {
		return fmt.Errorf("ceiling journal's keys: %w", err)
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("ceiling journal's keys: %w", err)
	}
	return nil
}

// writeAfter queues kvs for the goroutine that writes Badger's keys
// after the acks, starting it the first time; a full queue makes the
// committer wait, as a real log's index writer would.
func (j *ceilingJournal) writeAfter(st *store, kvs []kv) {
	if j.after == nil {
		j.after = make(chan []kv, 64)
		go func() {
			for kvs := range j.after {
				if err := ceilingKeys(st, kvs); err != nil {
					st.log.Error("ceiling journal's keys", "err", err)
				}
			}
		}()
	}
	j.after <- kvs
}

// append writes the group held in buf to the journal file in dir and
// makes it durable.
func (j *ceilingJournal) append(dir string) error {
	if j.f == nil {
		f, err := os.OpenFile(filepath.Join(dir, "ceiling-journal"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		j.f = f
	}
	if _, err := j.f.Write(j.buf); err != nil {
		return fmt.Errorf("ceiling journal: %w", err)
	}
	if err := unix.Fdatasync(int(j.f.Fd())); err != nil {
		return fmt.Errorf("ceiling journal: %w", err)
	}
	return nil
}

// ceilingHeader stands in for the columnar decode under
// HUB_CEILING_NODECODE: it reads the batch's header and event count and
// no column, so no event is checked either.
func (v *batchView) ceilingHeader(body []byte, lim wire.Limits) error {
	if len(body) < 1 {
		return malformed("columnar batch: no version")
	}
	hl, k := binary.Uvarint(body[1:])
	if k <= 0 || hl > uint64(len(body)-1-k) {
		return malformed("columnar batch: bad header length")
	}
	hdr := body[1+k : 1+k+int(hl)]
	n, k2 := binary.Uvarint(body[1+k+int(hl):])
	if k2 <= 0 || n == 0 || n > uint64(lim.MaxEvents) {
		return malformed("columnar batch: bad event count")
	}
	v.ceilingLen = int(n)
	return forFields(hdr, func(f field) error { return v.batchField(f, lim) })
}
