package hub

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// hubIDFile is the file in the data directory that keeps a generated hub
// id, so a restarted hub takes its own leases' identity again.
const hubIDFile = "hub-id"

// hubIDRE is hub/lease's rule for hub ids.
var hubIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validHubID(id string) bool { return hubIDRE.MatchString(id) }

// ensureHubID returns opts.HubID, or else the id kept in dir/hub-id,
// generating and writing one ("hub-" and 16 hex digits) the first time.
// A file holding something that is not a valid id is an error naming it.
func ensureHubID(dir, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	path := filepath.Join(dir, hubIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if !validHubID(id) {
			return "", fmt.Errorf("hub id file %s holds %q, not 1..64 letters, digits, '-' or '_': fix or delete it (a new id is then generated), or set hub-id", path, id)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("hub id file: %w", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := "hub-" + hex.EncodeToString(r[:])
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("hub id file: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o640); err != nil {
		return "", fmt.Errorf("hub id file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("hub id file: %w", err)
	}
	return id, nil
}
