package lease

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Keys of the lease bucket.
const (
	hubPrefix   = "hub."
	leasePrefix = "lease."
)

func hubKey(id string) string { return hubPrefix + id }
func leaseKey(p int) string   { return leasePrefix + strconv.Itoa(p) }

// record is the value of a lease or heartbeat key.
type record struct {
	// Hub is the holder's HubID.
	Hub string `json:"hub"`
	// Instance tells two runs of one HubID apart (a random nonce per
	// Open).
	Instance string `json:"instance"`
	// Epoch is the revision of the Create that acquired the lease; 0 in
	// that Create itself, whose revision is the epoch.
	Epoch uint64 `json:"epoch,omitempty"`
	// URL is the hub's advertised API base URL (Options.URL), in its
	// heartbeat only; "" when it advertises none.
	URL string `json:"url,omitempty"`
}

// maxRecord bounds a value read from the bucket before decoding. The
// largest record a valid Manager writes (a 64-byte hub id, the instance,
// a 20-digit epoch and a MaxURL URL, which CheckURL keeps free of JSON
// escapes) is well below it.
const maxRecord = 1024

func (r record) encode() []byte {
	b, _ := json.Marshal(r) // a struct of strings and numbers cannot fail
	return b
}

func decodeRecord(v []byte) (record, error) {
	if len(v) > maxRecord {
		return record{}, fmt.Errorf("%d bytes, want at most %d", len(v), maxRecord)
	}
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return record{}, err
	}
	if !nameRE.MatchString(r.Hub) {
		return record{}, fmt.Errorf("hub %q is not a valid hub id", r.Hub)
	}
	if r.URL != "" {
		if err := CheckURL(r.URL); err != nil {
			return record{}, fmt.Errorf("hub %q: url: %v", r.Hub, err)
		}
	}
	return r, nil
}
