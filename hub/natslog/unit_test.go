package natslog

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Options)
		field string // "" when valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"stream with a dot", func(o *Options) { o.Stream = "A.B" }, "Stream"},
		{"zero partitions after defaults", func(o *Options) { o.Partitions = -1 }, "Partitions"},
		{"too many partitions", func(o *Options) { o.Partitions = maxPartitions + 1 }, "Partitions"},
		{"six replicas", func(o *Options) { o.Replicas = 6 }, "Replicas"},
		{"max age under a minute", func(o *Options) { o.MaxAge = time.Second }, "MaxAge"},
		{"max bytes under 1 MiB", func(o *Options) { o.MaxBytes = 1000 }, "MaxBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o Options
			o.EnsureDefaults()
			tc.edit(&o)
			err := o.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid options refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want ErrInvalidOption naming %s", err, tc.field)
			}
		})
	}
}

func TestParseLogSubject(t *testing.T) {
	for _, tc := range []struct {
		subject string
		p       int
		device  string
		ok      bool
	}{
		{"edgeflow.log.7.dev-1", 7, "dev-1", true},
		{"edgeflow.log.0.site//7//pump", 0, "site.7.pump", true},
		{"edgeflow.log.7", 0, "", false},
		{"edgeflow.log.x.dev", 0, "", false},
		{"edgeflow.log.07.dev", 0, "", false},
		{"edgeflow.log.+7.dev", 0, "", false},
		{"edgeflow.log.-1.dev", 0, "", false},
		{"edgeflow.log.5000.dev", 0, "", false},
		{"edgeflow.log.1.a.b", 0, "", false},
		{"edgeflow.log.1.bad!id", 0, "", false},
		{"edgeflow.log.1./", 0, "", false},
		{"other.log.1.dev", 0, "", false},
	} {
		p, device, err := parseLogSubject(tc.subject)
		if tc.ok != (err == nil) || p != tc.p || device != tc.device {
			t.Errorf("%q: got %d %q %v; want %d %q ok=%v", tc.subject, p, device, err, tc.p, tc.device, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadSubject) {
			t.Errorf("%q: %v does not wrap ErrBadSubject", tc.subject, err)
		}
	}
}

// FuzzParseLogSubject: never panics, and a subject it accepts is the one
// the server would store for that device and partition.
func FuzzParseLogSubject(f *testing.F) {
	f.Add("edgeflow.log.7.dev-1")
	f.Add("edgeflow.log.0.site//7//pump")
	f.Add("edgeflow.log.1.///")
	f.Fuzz(func(t *testing.T, subject string) {
		p, device, err := parseLogSubject(subject)
		if err != nil {
			return
		}
		if again := LogPrefix + "." + strconv.Itoa(p) + "." + DeviceToken(device); again != subject {
			t.Fatalf("%q parsed as partition %d device %q, which is stored as %q", subject, p, device, again)
		}
	})
}

// FuzzDecodeCheckpoint: never panics, and what decodes re-encodes to the
// same bytes.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(42, []byte("state")))
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		pos, state, err := decodeCheckpoint(v)
		if err != nil {
			return
		}
		if again := encodeCheckpoint(pos, state); !bytes.Equal(again, v) {
			t.Fatalf("%x decoded to %d %x, which encodes as %x", v, pos, state, again)
		}
	})
}
