package clockest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Handing devices over: when a partition of the fleet moves between hubs,
// the giving hub exports its estimates of that partition's devices
// (ExportDevices), the taking hub merges them (ImportDevices), and a hub
// fenced off a partition forgets them (DropDevices). An export holds each
// device's observations oldest first and its step detection state, so
// the taking hub estimates exactly as the giving one would have.

const (
	handoverMagic   = "EFCLKH"
	handoverVersion = 1
	// maxDeviceID bounds a device id in an export (wire.MaxDeviceIDLen).
	maxDeviceID = 128
)

// ErrBadHandover is wrapped by every error ImportDevices returns for input
// that is not a valid export.
var ErrBadHandover = errors.New("clockest: bad device handover")

// ExportDevices encodes the estimator state of the devices keep selects,
// sorted by device id, in the versioned form ImportDevices reads.
func (c *DeviceClocks) ExportDevices(keep func(device string) bool) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0)
	for id := range c.devices {
		if keep(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	b := append([]byte(handoverMagic), handoverVersion)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		dc := c.devices[id]
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendVarint(b, dc.lastSeen)
		b = binary.AppendUvarint(b, uint64(dc.high))
		b = binary.AppendVarint(b, dc.highFrom)
		b = binary.AppendVarint(b, dc.highMin)
		b = binary.AppendVarint(b, dc.highMax)
		obs := dc.ordered()
		b = binary.AppendUvarint(b, uint64(len(obs)))
		for _, o := range obs {
			b = binary.AppendVarint(b, o.d)
			b = binary.AppendVarint(b, o.at)
		}
	}
	return b, nil
}

// reader reads an export; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or bad %s", ErrBadHandover, what)
	}
	r.b = nil
}

func (r *reader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

type importedClock struct {
	id string
	dc *deviceClock
}

// decode reads an export, bounding every count by the bytes left.
func (c *DeviceClocks) decode(data []byte) ([]importedClock, error) {
	if len(data) < len(handoverMagic)+1 || string(data[:len(handoverMagic)]) != handoverMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrBadHandover)
	}
	if v := data[len(handoverMagic)]; v != handoverVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrBadHandover, v, handoverVersion)
	}
	r := &reader{b: data[len(handoverMagic)+1:]}
	n := r.uvarint("device count")
	if n > uint64(len(r.b)/8) { // a device takes at least 8 bytes
		return nil, fmt.Errorf("%w: %d devices in %d bytes", ErrBadHandover, n, len(r.b))
	}
	out := make([]importedClock, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		l := r.uvarint("device id length")
		if r.err == nil && (l == 0 || l > maxDeviceID || l > uint64(len(r.b))) {
			r.fail("device id")
			break
		}
		id := string(r.b[:l])
		r.b = r.b[l:]
		if i > 0 && id <= out[len(out)-1].id {
			return nil, fmt.Errorf("%w: device %q out of order or listed twice", ErrBadHandover, id)
		}
		dc := &deviceClock{lastSeen: r.varint("last seen")}
		high := r.uvarint("step count")
		dc.highFrom, dc.highMin, dc.highMax = r.varint("step start"), r.varint("step min"), r.varint("step max")
		k := r.uvarint("observation count")
		if r.err == nil && (k > uint64(len(r.b)/2) || high > uint64(c.opts.Window)) {
			return nil, fmt.Errorf("%w: device %q: %d observations, step count %d", ErrBadHandover, id, k, high)
		}
		obs := make([]clockObs, k)
		for j := range obs {
			obs[j] = clockObs{d: r.varint("observation"), at: r.varint("observation")}
		}
		if r.err != nil {
			break
		}
		// A smaller window keeps the newest observations.
		obs = obs[max(0, len(obs)-c.opts.Window):]
		dc.obs = make([]clockObs, len(obs), c.opts.Window)
		copy(dc.obs, obs)
		dc.next = len(obs) % c.opts.Window
		dc.high = int(high)
		out = append(out, importedClock{id, dc})
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// ImportDevices merges an export into the estimator. It refuses, changing
// nothing, input that is not a valid export and an export holding a
// device the estimator already tracks (the error names it). Beyond
// MaxDevices the devices seen longest ago are forgotten, as Observe does.
// With the same Window as the exporting estimator, Estimate answers for
// the imported devices exactly as the exporter did; a smaller Window keeps
// each device's newest observations.
func (c *DeviceClocks) ImportDevices(data []byte) error {
	devs, err := c.decode(data)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range devs {
		if _, dup := c.devices[d.id]; dup {
			return fmt.Errorf("clockest: import devices: device %q is already tracked here; drop it first", d.id)
		}
	}
	for _, d := range devs {
		if len(c.devices) >= c.opts.MaxDevices {
			c.evictStalest()
		}
		c.devices[d.id] = d.dc
	}
	return nil
}

// DropDevices forgets the devices keep selects and returns how many it
// forgot: a hub fenced off a partition stops estimating for its devices.
func (c *DeviceClocks) DropDevices(keep func(device string) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.devices)
	maps.DeleteFunc(c.devices, func(id string, _ *deviceClock) bool { return keep(id) })
	return n - len(c.devices)
}
