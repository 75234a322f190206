package attrs

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"unicode/utf8"

	"edgeflow/aggregate"
)

// Version is one version of a device's attributes (the engine's type, so
// the table hands its slices to queries without copying).
type Version = aggregate.AttrVersion

// Limits bound what the table accepts; every field has a default
// (DefaultLimits) and a value from the wire beyond one is refused.
type Limits struct {
	MaxKeys     int // attributes in one version (default 32)
	MaxKeyLen   int // bytes of a key (default 64)
	MaxValueLen int // bytes of a value (default 256)
	// MaxVersions is the versions one device keeps (default 1024); a
	// write beyond it is refused until compaction folds old ones.
	MaxVersions int
	MaxDevices  int // devices in the table (default 1,000,000)
}

// DefaultLimits are the limits the hub uses.
var DefaultLimits = Limits{MaxKeys: 32, MaxKeyLen: 64, MaxValueLen: 256, MaxVersions: 1024, MaxDevices: 1_000_000}

// ErrInvalid marks a version the table refuses; the *FieldError wrapping
// it names the field.
var ErrInvalid = errors.New("invalid attributes")

// FieldError names the field of a write that is wrong ("attributes.site",
// "effective_from") and why.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ValidKey reports why k cannot be an attribute key: 1..MaxKeyLen bytes of
// ASCII letters, digits, '_', '-' and '.', starting with a letter (keys
// appear in query parameters as attr.KEY).
func (l Limits) ValidKey(k string) error {
	if k == "" || len(k) > l.MaxKeyLen {
		return fieldErr("attributes", "key %q must be 1 to %d bytes", truncate(k), l.MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !(letter || i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')) {
			return fieldErr("attributes", "key %q: only letters, digits, '_', '-' and '.' (starting with a letter)", truncate(k))
		}
	}
	return nil
}

// Validate checks one version's attributes against l, naming the first
// bad key in sorted order.
func (l Limits) Validate(a map[string]string) error {
	if len(a) > l.MaxKeys {
		return fieldErr("attributes", "%d keys, at most %d", len(a), l.MaxKeys)
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if err := l.ValidKey(k); err != nil {
			return err
		}
		v := a[k]
		field := "attributes." + k
		switch {
		case len(v) > l.MaxValueLen:
			return fieldErr(field, "value of %d bytes, at most %d", len(v), l.MaxValueLen)
		case !utf8.ValidString(v):
			return fieldErr(field, "value is not UTF-8")
		case hasControl(v):
			return fieldErr(field, "value holds a control character")
		}
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Table is the attribute table. Writes (Put, Restore, Compact) come from
// the hub's applier goroutine; reads from anywhere. A device's version
// slice is replaced, never modified, so a reader may keep one.
type Table struct {
	mu  sync.RWMutex
	lim Limits
	dev map[string][]Version
	// held marks the devices whose versions came from another hub's
	// partition checkpoint (ReplaceDevices): this hub's event index
	// does not hold their older events, so Compact cannot tell which
	// versions the imported partials still need, and leaves them.
	held map[string]bool
}

// New returns an empty table with lim (zero fields take DefaultLimits').
func New(lim Limits) *Table {
	d := DefaultLimits
	if lim.MaxKeys <= 0 {
		lim.MaxKeys = d.MaxKeys
	}
	if lim.MaxKeyLen <= 0 {
		lim.MaxKeyLen = d.MaxKeyLen
	}
	if lim.MaxValueLen <= 0 {
		lim.MaxValueLen = d.MaxValueLen
	}
	if lim.MaxVersions <= 0 {
		lim.MaxVersions = d.MaxVersions
	}
	if lim.MaxDevices <= 0 {
		lim.MaxDevices = d.MaxDevices
	}
	return &Table{lim: lim, dev: map[string][]Version{}, held: map[string]bool{}}
}

// Limits returns the table's limits.
func (t *Table) Limits() Limits { return t.lim }

// AttrVersions implements aggregate.AttrSource: the device's versions by
// effective time (read only).
func (t *Table) AttrVersions(device string) []Version {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.dev[device]
}

// At returns the version of device in force at ns, and false before its
// first version.
func (t *Table) At(device string, ns int64) (Version, bool) {
	vs := t.AttrVersions(device)
	i := sort.Search(len(vs), func(i int) bool { return vs[i].From > ns })
	if i == 0 {
		return Version{}, false
	}
	return vs[i-1], true
}

// Devices returns how many devices the table holds.
func (t *Table) Devices() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.dev)
}

// Check reports why Put would refuse v for device (limits only; the
// caller validated the attributes): the API calls it before logging a
// version, so a refused write is never logged.
func (t *Table) Check(device string, v Version) error {
	if err := t.lim.Validate(v.Attrs); err != nil {
		return err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	vs, ok := t.dev[device]
	if !ok && len(t.dev) >= t.lim.MaxDevices {
		return fieldErr("id", "the table holds %d devices, its limit", t.lim.MaxDevices)
	}
	if _, found := slices.BinarySearchFunc(vs, v.From, byFrom); !found && len(vs) >= t.lim.MaxVersions {
		return fieldErr("effective_from", "device %s already has %d versions, its limit (compaction folds those older than its oldest stored event)", device, t.lim.MaxVersions)
	}
	return nil
}

func byFrom(v Version, from int64) int { return cmp.Compare(v.From, from) }

// Change is what one Put changed: the event times [From, To) whose
// version in force differs (To is math.MaxInt64 for "from then on");
// Changed is false when the attributes in force there are the same.
type Change struct {
	From, To int64
	Changed  bool
}

// Put writes v for device: it replaces a version with the same From, else
// it is inserted among the others. Limits are checked again (a replayed
// log entry beyond them, written under larger limits, is still applied,
// so replay never diverges from the live run).
func (t *Table) Put(device string, v Version) Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.dev[device]
	i, found := slices.BinarySearchFunc(old, v.From, byFrom)
	var prev map[string]string
	switch {
	case found:
		prev = old[i].Attrs
	case i > 0:
		prev = old[i-1].Attrs
	}
	vs := make([]Version, 0, len(old)+1)
	vs = append(vs, old[:i]...)
	vs = append(vs, v)
	next := i
	if found {
		next++
	}
	vs = append(vs, old[next:]...)
	t.dev[device] = vs
	ch := Change{From: v.From, To: math.MaxInt64, Changed: !maps.Equal(prev, v.Attrs)}
	if i+1 < len(vs) {
		ch.To = vs[i+1].From
	}
	if prev == nil && len(v.Attrs) == 0 && !found && i == 0 {
		ch.Changed = false
	}
	return ch
}

// Compact folds, for each device (not held: see ReplaceDevices) whose oldest stored event time oldest
// reports, the versions in force only before it into the version in
// force then: that version takes the effective time of the oldest one
// folded, so windows older than the device's stored events (still held
// as aggregate partials) keep a version. It returns how many versions it
// removed.
func (t *Table) Compact(oldest func(device string) (int64, bool)) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	removed := 0
	for d, vs := range t.dev {
		if t.held[d] {
			continue
		}
		ns, ok := oldest(d)
		if !ok {
			continue
		}
		i := sort.Search(len(vs), func(i int) bool { return vs[i].From > ns }) - 1
		if i <= 0 {
			continue
		}
		kept := vs[i]
		kept.From = vs[0].From
		out := make([]Version, 0, len(vs)-i)
		out = append(out, kept)
		out = append(out, vs[i+1:]...)
		t.dev[d] = out
		removed += i
	}
	return removed
}

// DropDevices removes the versions of the devices keep selects (a
// partition this hub no longer applies) and returns how many devices it
// removed.
func (t *Table) DropDevices(keep func(device string) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropLocked(keep)
}

func (t *Table) dropLocked(keep func(string) bool) int {
	n := 0
	for d := range t.dev {
		if keep(d) {
			delete(t.dev, d)
			n++
		}
	}
	for d := range t.held {
		if keep(d) {
			delete(t.held, d)
		}
	}
	return n
}

// CheckExport reports why ReplaceDevices would refuse an export: it does
// not decode, or it holds a device keep does not select.
func (t *Table) CheckExport(keep func(device string) bool, b []byte) error {
	dev, _, err := t.decodeTable(b)
	if err != nil {
		return err
	}
	return checkKept(dev, keep)
}

func checkKept(dev map[string][]Version, keep func(string) bool) error {
	for d := range dev {
		if !keep(d) {
			return fmt.Errorf("%w: the export holds device %s, which is not among the devices it replaces", ErrCorrupt, d)
		}
	}
	return nil
}

// ReplaceDevices makes the versions of the devices keep selects exactly
// an ExportDevices' (a partition taken over from another hub's
// checkpoint): those devices' versions leave the table and the export's
// enter it, each with the Written time the exporter had. It is
// idempotent, and changes nothing when the export does not decode or
// holds a device keep does not select. The devices imported are held:
// Compact leaves their versions (this hub's log holds none of their
// events before the import, so its event index cannot bound them). It
// returns how many devices were removed and how many imported. The
// versions are not changes (Put's): the exporter applied them in stream
// order and announced them then, so nothing is revised here.
func (t *Table) ReplaceDevices(keep func(device string) bool, b []byte) (removed, imported int, err error) {
	dev, _, err := t.decodeTable(b)
	if err != nil {
		return 0, 0, err
	}
	if err := checkKept(dev, keep); err != nil {
		return 0, 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	removed = t.dropLocked(keep)
	for d, vs := range dev {
		if len(vs) == 0 {
			continue
		}
		t.dev[d] = vs
		t.held[d] = true
		imported++
	}
	return removed, imported, nil
}

// Held returns how many devices hold versions imported from another
// hub's checkpoint (not compacted here).
func (t *Table) Held() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.held)
}
