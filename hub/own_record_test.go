package hub

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHubIDKept: an id is generated once and kept in the data directory;
// a configured id wins; a damaged file is an error naming it.
func TestHubIDKept(t *testing.T) {
	dir := t.TempDir()
	id, err := ensureHubID(dir, "")
	if err != nil || !validHubID(id) || !strings.HasPrefix(id, "hub-") {
		t.Fatalf("generated id %q, %v", id, err)
	}
	again, err := ensureHubID(dir, "")
	if err != nil || again != id {
		t.Fatalf("second start: %q, %v; want %q", again, err, id)
	}
	if got, _ := ensureHubID(dir, "east-1"); got != "east-1" {
		t.Fatalf("configured id: got %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, hubIDFile), []byte("no dots.here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureHubID(dir, ""); err == nil || !strings.Contains(err.Error(), hubIDFile) {
		t.Fatalf("damaged id file: %v", err)
	}
	o := Options{HubID: "a.b"}
	if err := o.validateNATS(func(field, format string, args ...any) error { return errors.New(field) }); err == nil || err.Error() != "HubID" {
		t.Fatalf("invalid HubID: %v", err)
	}
}

// TestPartCkptRecord: checkpoints and ownership records round-trip, and
// every truncation or bad length of one is refused, not read past.
func TestPartCkptRecord(t *testing.T) {
	ck := &partCkpt{pos: 12345, engine: []byte("engine-state"), reg: []byte("registry"), clock: nil}
	b := ck.encode()
	got, err := decodePartCkpt(b)
	if err != nil || got.pos != ck.pos || !bytes.Equal(got.engine, ck.engine) || !bytes.Equal(got.reg, ck.reg) || len(got.clock) != 0 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := decodePartCkpt(b[:i]); !errors.Is(err, errBadPartCkpt) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	if _, err := decodePartCkpt(append(b, 0)); !errors.Is(err, errBadPartCkpt) {
		t.Fatalf("trailing byte: %v", err)
	}
	rec := &ownRecord{op: ownImport, part: 5, ckpt: ck}
	r2, err := decodeOwnRecord(rec.encode(), 8)
	if err != nil || r2.op != ownImport || r2.part != 5 || r2.ckpt.pos != ck.pos {
		t.Fatalf("ownership record: %+v, %v", r2, err)
	}
	if _, err := decodeOwnRecord(rec.encode(), 4); !errors.Is(err, errBadPartCkpt) {
		t.Fatalf("partition beyond the stream's count: %v", err)
	}
	drop := (&ownRecord{op: ownDrop, part: 3}).encode()
	if r3, err := decodeOwnRecord(drop, 8); err != nil || r3.op != ownDrop || r3.part != 3 {
		t.Fatalf("drop record: %+v, %v", r3, err)
	}
	if _, err := decodeOwnRecord([]byte{9, 1}, 8); !errors.Is(err, errBadPartCkpt) {
		t.Fatalf("unknown operation: %v", err)
	}
}

// TestPartCkptAttrsSection: a checkpoint with the attribute section
// (version 2) round-trips and refuses every truncation; one of version 1
// (a build before the section) still decodes, without it, and encodes
// back to the same bytes, so a KindOwn entry holding it replays alike.
func TestPartCkptAttrsSection(t *testing.T) {
	ck := &partCkpt{pos: 77, engine: []byte("e"), reg: []byte("r"), clock: []byte("c"), hasAttrs: true, attrs: []byte("attribute-versions")}
	b := ck.encode()
	got, err := decodePartCkpt(b)
	if err != nil || !got.hasAttrs || !bytes.Equal(got.attrs, ck.attrs) || !bytes.Equal(got.clock, ck.clock) || got.pos != 77 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := decodePartCkpt(b[:i]); !errors.Is(err, errBadPartCkpt) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	old := &partCkpt{pos: 77, engine: []byte("e"), reg: []byte("r"), clock: []byte("c")}
	ob := old.encode()
	if ob[len(partCkptMagic)] != partCkptVersionV1 {
		t.Fatalf("a record without the attribute section is written as version %d", ob[len(partCkptMagic)])
	}
	got, err = decodePartCkpt(ob)
	if err != nil || got.hasAttrs || got.attrs != nil || !bytes.Equal(got.encode(), ob) {
		t.Fatalf("version 1: %+v, %v", got, err)
	}
	// Version 1's bytes with a fourth section appended are trailing bytes.
	if _, err := decodePartCkpt(append(ob, 1, 'x')); !errors.Is(err, errBadPartCkpt) {
		t.Fatalf("version 1 with an extra section: %v", err)
	}
	bad := bytes.Clone(b)
	bad[len(partCkptMagic)] = 4
	if _, err := decodePartCkpt(bad); !errors.Is(err, errBadPartCkpt) {
		t.Fatalf("version 4: %v", err)
	}
}

// TestPartCkptHolders: the holders section (version 3) round-trips and
// refuses every truncation, an id beyond 64 bytes and a count beyond the
// bound; a version 2 record (attributes, no holders) decodes without
// holders and encodes back to the same bytes.
func TestPartCkptHolders(t *testing.T) {
	ck := &partCkpt{pos: 9, engine: []byte("e"), reg: []byte("r"), hasAttrs: true, attrs: []byte("a"),
		holders: map[string]int64{"hub-a": 1_700_000_000_000_000_000, "hub-b": -5}}
	b := ck.encode()
	if b[len(partCkptMagic)] != partCkptVersion {
		t.Fatalf("written as version %d", b[len(partCkptMagic)])
	}
	got, err := decodePartCkpt(b)
	if err != nil || !maps.Equal(got.holders, ck.holders) || !bytes.Equal(got.attrs, ck.attrs) || !bytes.Equal(got.encode(), b) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := decodePartCkpt(b[:i]); !errors.Is(err, errBadPartCkpt) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	for name, h := range map[string][]byte{
		"long id":      binary.AppendVarint(append(binary.AppendUvarint([]byte{1}, 65), strings.Repeat("x", 65)...), 1),
		"empty id":     binary.AppendVarint([]byte{1, 0}, 1),
		"count":        binary.AppendUvarint(nil, maxHolders+1),
		"extra holder": append(encodeHolders(map[string]int64{"a": 1}), 0),
	} {
		if _, err := decodeHolders(h); !errors.Is(err, errBadPartCkpt) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	v2 := &partCkpt{version: partCkptVersionV2, pos: 9, engine: []byte("e"), reg: []byte("r"), hasAttrs: true, attrs: []byte("a")}
	vb := v2.encode()
	got, err = decodePartCkpt(vb)
	if err != nil || got.version != partCkptVersionV2 || got.holders != nil || !bytes.Equal(got.encode(), vb) {
		t.Fatalf("version 2: %+v, %v", got, err)
	}
}
