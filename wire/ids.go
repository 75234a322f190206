package wire

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// StreamID identifies one durable event log of a device. It is random and
// created with the agent's buffer, so a re-flashed device starts a new
// stream instead of colliding with its old sequence numbers.
type StreamID [16]byte

// NewStreamID returns a fresh random StreamID.
func NewStreamID() StreamID {
	var id StreamID
	if _, err := rand.Read(id[:]); err != nil {
		// crypto/rand never fails on supported platforms (Go 1.24+ panics
		// internally instead); keep the error path explicit anyway.
		panic(fmt.Sprintf("wire: crypto/rand: %v", err))
	}
	return id
}

// String returns the 32-digit lower-case hex form used in logs and the API.
func (id StreamID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id was never set.
func (id StreamID) IsZero() bool { return id == StreamID{} }

// MaxDeviceIDLen bounds device identifiers (they appear in topics and keys).
const MaxDeviceIDLen = 128

// ValidateDeviceID checks that id is usable as one MQTT topic level and as a
// storage key: 1 to 128 characters of letters, digits, '.', '_' and '-'.
func ValidateDeviceID(id string) error {
	if id == "" {
		return errors.New("device id is empty")
	}
	if len(id) > MaxDeviceIDLen {
		return fmt.Errorf("device id is %d bytes, limit %d", len(id), MaxDeviceIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("device id %q has character %q at %d (allowed: letters, digits, '.', '_', '-')", id, c, i)
		}
	}
	return nil
}
