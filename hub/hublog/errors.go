package hublog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"edgeflow/hub/ranges"
)

// The package's sentinel errors, which callers (hubd, recovery) branch on
// with errors.Is. Their messages start "hub:" because an operator reads
// them as the hub's; every error that wraps one names the directory or the
// key and says what the operator can do.

// ErrCorrupt is wrapped by errors about stored data the hub cannot read.
// The message names the key; see ErrStoreDamaged and ErrLogDamaged for
// what the operator can do.
var ErrCorrupt = errors.New("hub: corrupt store")

// ErrCheckpointDamaged is wrapped by the reason a stored checkpoint could
// not be used; recovery then falls back to an older one or to the log.
var ErrCheckpointDamaged = errors.New("checkpoint damaged")

// Errors of opening and reading the store.
var (
	// ErrStoreLocked: another process (a running hubd or `hubd rebuild`)
	// holds the store's directory lock. Nothing is wrong with the data.
	ErrStoreLocked = errors.New("hub: store in use by another process")
	// ErrStoreDamaged: Badger cannot open the directory (an empty or
	// truncated MANIFEST, a missing table file, a bad checksum). It also
	// wraps ErrCorrupt.
	ErrStoreDamaged = errors.New("hub: store damaged")
	// ErrLogDamaged: log entries cannot be read (see *LogDamageError). It
	// also wraps ErrCorrupt.
	ErrLogDamaged = errors.New("hub: log damaged")
)

// recoverHint is what an operator can do about a damaged store; the
// config key is RecoverDamaged's.
const recoverHint = "restore the data directory from a backup, or start with what is readable and the loss recorded " +
	"(hubd --recover-damaged, or recover-damaged: true; `hubd rebuild --recover-damaged` takes it too)"

// classifyOpenError turns badger.Open's error into one that says whether
// the directory is held by another process or damaged.
func classifyOpenError(dir string, err error) error {
	msg := err.Error()
	if errors.Is(err, syscall.EWOULDBLOCK) || strings.Contains(msg, "Cannot acquire directory lock") {
		holder := ""
		if b, rerr := os.ReadFile(filepath.Join(dir, "LOCK")); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = " (process " + pid + " per its LOCK file)"
			}
		}
		return fmt.Errorf("%w: hub store %s is locked by another process%s: stop the other hubd or `hubd rebuild` using it, "+
			"or give this hubd another data-dir; the data is not damaged", ErrStoreLocked, dir, holder)
	}
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("open hub store %s: %w (check the directory's owner and mode)", dir, err)
	}
	return &classifiedError{errs: []error{ErrStoreDamaged, ErrCorrupt, err}, msg: fmt.Sprintf("%s: hub store %s cannot be opened: %v: "+
		"Badger's own files (MANIFEST, tables) are unreadable, so neither a replay nor `hubd rebuild` can read it; "+
		"restore the data directory from a backup (keep the damaged copy for inspection)", ErrStoreDamaged, dir, err)}
}

// classifiedError is an error with its own message that errors.Is
// matches against each of errs.
type classifiedError struct {
	msg  string
	errs []error
}

func (e *classifiedError) Error() string   { return e.msg }
func (e *classifiedError) Unwrap() []error { return e.errs }

// LogDamageError says which part of the log could not be read: positions,
// server times and, where the event-time index knows them, devices. It
// wraps ErrLogDamaged and ErrCorrupt.
type LogDamageError struct {
	// Dir is the store's directory.
	Dir string
	// Positions are the damaged log positions (unreadable or missing
	// entries), as ranges.
	Positions ranges.RangeSet
	// FromServerTime and ToServerTime bound the damaged entries' server
	// times (zero when unknown).
	FromServerTime, ToServerTime time.Time
	// Devices are devices with entries among the damaged ones (from the
	// event-time index; may be incomplete).
	Devices []string
	// Why describes the first damage found.
	Why string
}

// Error implements error.
func (e *LogDamageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: hub store %s: %d log entries at positions %s cannot be read", ErrLogDamaged, e.Dir, e.Positions.Count(), FormatRanges(&e.Positions))
	if !e.FromServerTime.IsZero() {
		fmt.Fprintf(&b, " (server time %s to %s)", e.FromServerTime.UTC().Format(time.RFC3339Nano), e.ToServerTime.UTC().Format(time.RFC3339Nano))
	}
	if len(e.Devices) > 0 {
		fmt.Fprintf(&b, ", devices %s", strings.Join(e.Devices, ", "))
	}
	if e.Why != "" {
		fmt.Fprintf(&b, " (%s)", e.Why)
	}
	b.WriteString("; " + recoverHint)
	return b.String()
}

// Unwrap makes errors.Is true for ErrLogDamaged and ErrCorrupt.
func (e *LogDamageError) Unwrap() []error { return []error{ErrLogDamaged, ErrCorrupt} }

// formatRanges writes ranges as "3-7, 9"; past a dozen it says how many more.
func FormatRanges(s *ranges.RangeSet) string {
	var parts []string
	for i, r := range s.Ranges() {
		if i == 12 {
			parts = append(parts, fmt.Sprintf("and %d more ranges", s.Len()-i))
			break
		}
		if r.First == r.Last {
			parts = append(parts, fmt.Sprint(r.First))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r.First, r.Last))
		}
	}
	return strings.Join(parts, ", ")
}
