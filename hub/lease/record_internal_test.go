package lease

import (
	"strings"
	"testing"
)

// TestRecordBound: the largest record a valid Manager writes (longest hub
// id, instance, epoch and URL) fits the bound records are read with, and
// reads back as written.
func TestRecordBound(t *testing.T) {
	r := record{Hub: strings.Repeat("h", 64), Instance: strings.Repeat("f", 16), Epoch: ^uint64(0),
		URL: "https://" + strings.Repeat("a", MaxURL-len("https://"))}
	if err := CheckURL(r.URL); err != nil {
		t.Fatal(err)
	}
	b := r.encode()
	if len(b) > maxRecord {
		t.Fatalf("largest record is %d bytes, bound %d", len(b), maxRecord)
	}
	got, err := decodeRecord(b)
	if err != nil || got != r {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	t.Logf("largest record: %d of %d bytes", len(b), maxRecord)
	bad := record{Hub: "h", Instance: "i", URL: "ftp://x"}.encode()
	if _, err := decodeRecord(bad); err == nil || !strings.Contains(err.Error(), "url") {
		t.Fatalf("a record with a bad URL: %v", err)
	}
}
