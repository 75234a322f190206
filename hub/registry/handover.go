package registry

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"edgeflow/wire"
)

// Handing devices over: when a partition of the fleet moves from one hub
// to another, the giving hub exports the entries of that partition's
// devices (ExportDevices), the taking hub merges them into its registry
// (ImportDevices), and a hub fenced off a partition forgets them
// (DropDevices). The export is the checkpoint's JSON of the selected
// entries behind a magic, a version and a length, so it is bounded and
// checked before anything is decoded.

const (
	handoverMagic   = "EFREGH"
	handoverVersion = 1
	// MaxHandoverBytes bounds the JSON body of an export that
	// ImportDevices accepts (a device entry is a few hundred bytes plus
	// its ranges).
	MaxHandoverBytes = 256 << 20
)

// ErrBadHandover is wrapped by every error ImportDevices returns for input
// that is not a valid export.
var ErrBadHandover = errors.New("registry: bad device handover")

// ExportDevices encodes the entries of the devices keep selects, in the
// versioned form ImportDevices reads. Devices the registry does not know
// are simply absent.
func (r *Registry) ExportDevices(keep func(device string) bool) ([]byte, error) {
	r.mu.RLock()
	sel := make(map[string]*deviceState)
	for id, d := range r.devices {
		if keep(id) {
			sel[id] = d
		}
	}
	body, err := json.Marshal(sel) // under the read lock: entries are mutated in place by the applier
	r.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("registry: export devices: %w", err)
	}
	out := make([]byte, 0, len(handoverMagic)+2*binary.MaxVarintLen64+len(body))
	out = append(out, handoverMagic...)
	out = binary.AppendUvarint(out, handoverVersion)
	out = binary.AppendUvarint(out, uint64(len(body)))
	return append(out, body...), nil
}

// decodeHandover checks an export's header and decodes its entries.
func decodeHandover(data []byte) (map[string]*deviceState, error) {
	if len(data) < len(handoverMagic) || string(data[:len(handoverMagic)]) != handoverMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrBadHandover)
	}
	b := data[len(handoverMagic):]
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: truncated version", ErrBadHandover)
	}
	if v != handoverVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrBadHandover, v, handoverVersion)
	}
	b = b[n:]
	size, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: truncated length", ErrBadHandover)
	}
	b = b[n:]
	if size > MaxHandoverBytes {
		return nil, fmt.Errorf("%w: body of %d bytes, limit %d", ErrBadHandover, size, MaxHandoverBytes)
	}
	if size != uint64(len(b)) {
		return nil, fmt.Errorf("%w: body says %d bytes, %d follow", ErrBadHandover, size, len(b))
	}
	devices := map[string]*deviceState{}
	if err := json.Unmarshal(b, &devices); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHandover, err)
	}
	for id, d := range devices {
		if err := wire.ValidateDeviceID(id); err != nil {
			return nil, fmt.Errorf("%w: device %q: %v", ErrBadHandover, id, err)
		}
		if d == nil {
			return nil, fmt.Errorf("%w: device %q: null entry", ErrBadHandover, id)
		}
		if d.Streams == nil {
			d.Streams = map[string]*streamInfo{}
		}
		for sid, s := range d.Streams {
			if s == nil {
				return nil, fmt.Errorf("%w: device %q stream %q: null entry", ErrBadHandover, id, sid)
			}
			if raw, err := hex.DecodeString(sid); err != nil || len(raw) != len(wire.StreamID{}) || hex.EncodeToString(raw) != sid {
				return nil, fmt.Errorf("%w: device %q stream %q: not a 32-digit lower-case hex stream id", ErrBadHandover, id, sid)
			}
		}
	}
	return devices, nil
}

// ImportDevices merges an export into the registry. It refuses, changing
// nothing, input that is not a valid export and an export holding a
// device the registry already has (the error names the first such device
// in id order): a partition has one owner, so a device is never merged
// into an entry of its own.
func (r *Registry) ImportDevices(data []byte) error {
	devices, err := decodeHandover(data)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(devices))
	for id := range devices {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if _, dup := r.devices[id]; dup {
			return fmt.Errorf("registry: import devices: device %q is already held here; drop it first", id)
		}
	}
	for _, id := range ids {
		r.devices[id] = devices[id]
	}
	return nil
}

// DropDevices forgets the entries of the devices keep selects, and returns
// how many it forgot: a hub fenced off a partition stops answering for its
// devices.
func (r *Registry) DropDevices(keep func(device string) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.devices)
	maps.DeleteFunc(r.devices, func(id string, _ *deviceState) bool { return keep(id) })
	return n - len(r.devices)
}
