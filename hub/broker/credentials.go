package broker

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"edgeflow/wire"
)

// ErrBadCredentialsFile is wrapped by every error about the contents of a
// credentials file; it names the line, never the hash or a password.
var ErrBadCredentialsFile = errors.New("bad credentials file")

// Credentials are the devices allowed on the embedded broker with their
// bcrypt password hashes, read from a file of "device-id:hash" lines (the
// same shape as a Mosquitto password file; `hubd passwd` writes them).
// Blank lines and lines starting with '#' are ignored.
//
// The set can be replaced while the broker runs (Server.ReloadCredentials).
type Credentials struct {
	mu     sync.Mutex
	hashes map[string][]byte
	// ok caches a SHA-256 of the last password that verified per device,
	// so a reconnecting agent does not cost a bcrypt comparison each time.
	ok map[string][32]byte
}

// LoadCredentials reads a credentials file.
func LoadCredentials(path string) (*Credentials, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("credentials file: %w", err)
	}
	defer f.Close()
	c, err := ParseCredentials(f)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	return c, nil
}

// ParseCredentials reads "device-id:bcrypt-hash" lines from r.
func ParseCredentials(r io.Reader) (*Credentials, error) {
	c := &Credentials{hashes: map[string][]byte{}, ok: map[string][32]byte{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		dev, hash, found := strings.Cut(line, ":")
		if !found {
			return nil, fmt.Errorf("%w: line %d: want device-id:bcrypt-hash", ErrBadCredentialsFile, n)
		}
		if err := wire.ValidateDeviceID(dev); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadCredentialsFile, n, err)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%w: line %d (device %s): not a bcrypt hash (make one with `hubd passwd`)", ErrBadCredentialsFile, n, dev)
		}
		if _, dup := c.hashes[dev]; dup {
			return nil, fmt.Errorf("%w: line %d: device %s listed twice", ErrBadCredentialsFile, n, dev)
		}
		c.hashes[dev] = []byte(hash)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// Len is the number of devices listed.
func (c *Credentials) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.hashes)
}

// Verify reports whether password is device's.
func (c *Credentials) Verify(device string, password []byte) bool {
	return c.cached(device, password) || c.compare(device, password)
}

// cached reports whether password is the last one that verified for
// device, which costs a SHA-256 rather than a bcrypt comparison.
func (c *Credentials) cached(device string, password []byte) bool {
	c.mu.Lock()
	last, ok := c.ok[device]
	c.mu.Unlock()
	sum := sha256.Sum256(password)
	return ok && subtle.ConstantTimeCompare(last[:], sum[:]) == 1
}

// compare checks password against device's bcrypt hash, and remembers it
// when it verifies. An unknown device costs a comparison too.
func (c *Credentials) compare(device string, password []byte) bool {
	c.mu.Lock()
	hash, ok := c.hashes[device]
	c.mu.Unlock()
	if !ok {
		// Spend the same time as a wrong password, so probing for device
		// names is no faster than guessing passwords.
		_ = bcrypt.CompareHashAndPassword(dummyHash(), password)
		return false
	}
	if bcrypt.CompareHashAndPassword(hash, password) != nil {
		return false
	}
	sum := sha256.Sum256(password)
	c.mu.Lock()
	if bytes.Equal(c.hashes[device], hash) { // not replaced meanwhile
		c.ok[device] = sum
	}
	c.mu.Unlock()
	return true
}

// Replace takes n's devices and hashes in place of c's and returns the
// devices whose credentials are gone or changed: their connected clients
// proved a password that may no longer be valid. n must not be used after.
func (c *Credentials) Replace(n *Credentials) (revoked []string) {
	n.mu.Lock()
	hashes := n.hashes
	n.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for dev, h := range c.hashes {
		if nh, ok := hashes[dev]; !ok || !bytes.Equal(nh, h) {
			revoked = append(revoked, dev)
			delete(c.ok, dev)
		}
	}
	c.hashes = hashes
	return revoked
}

// dummyHash is compared against when a device is unknown.
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("edgeflow-no-such-device"), bcrypt.DefaultCost)
	return h
})

// HashPassword returns a credentials file line for device: "device:hash".
// cost 0 takes bcrypt.DefaultCost.
func HashPassword(device string, password []byte, cost int) (string, error) {
	if err := wire.ValidateDeviceID(device); err != nil {
		return "", err
	}
	if len(password) == 0 {
		return "", errors.New("empty password")
	}
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	h, err := bcrypt.GenerateFromPassword(password, cost)
	if err != nil {
		return "", err
	}
	return device + ":" + string(h), nil
}

// SetCredentialLine replaces device's line in the credentials text old, or
// appends line if the device is not listed, and returns the new text.
func SetCredentialLine(old []byte, device, line string) []byte {
	var out bytes.Buffer
	replaced := false
	for _, l := range strings.SplitAfter(string(old), "\n") {
		if l == "" {
			continue
		}
		if dev, _, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && dev == device && !replaced {
			out.WriteString(line + "\n")
			replaced = true
			continue
		}
		out.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			out.WriteByte('\n')
		}
	}
	if !replaced {
		out.WriteString(line + "\n")
	}
	return out.Bytes()
}
