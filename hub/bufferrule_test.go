package hub

import (
	"bytes"
	"context"
	"testing"
	"time"

	"edgeflow/hub/rules"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// TestBufferRuleThroughHub: logged statuses feed buffer rules. A status
// over the fill ratio fires, one whose time to full is under the rule's
// fires the other rule, an offline status (a last will) and a status
// without buffer figures (an older agent) change nothing, the next low
// status resolves; a crash and a restart that replays the statuses list
// the same alerts.
func TestBufferRuleThroughHub(t *testing.T) {
	dir := t.TempDir()
	rs, err := rules.ParseYAML([]byte(`
rules:
  - {name: full, kind: buffer, fill_ratio: 0.8}
  - {name: soon, kind: buffer, time_to_full: 10m}
`))
	if err != nil {
		t.Fatal(err)
	}
	opts := func() Options { o := aggTestOptions(t, dir); o.Rules = rs; return o }
	s1 := startHub(t, opts())
	d1 := newDevice(t, "tcp://"+s1.BrokerAddr(), "b1")
	d2 := newDevice(t, "tcp://"+s1.BrokerAddr(), "b2")
	status := func(d *device, online bool, fill *wirepb.BufferFill) {
		t.Helper()
		st, _ := wire.EncodeStatus(&wirepb.Status{DeviceId: d.id, Online: online, Buffer: fill})
		if tok := d.c.Publish(wire.StatusTopic(d.id), 1, true, st); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	// alerts maps rule/group to the latest alert.
	alerts := func() map[string]rules.Alert {
		as, _, err := s1.Alerts(rules.Filter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]rules.Alert{}
		for _, a := range as {
			m[a.Rule+"/"+a.Group] = a
		}
		return m
	}
	// 90% full, draining: only the ratio rule.
	status(d1, true, &wirepb.BufferFill{CapacityBytes: 1000, UsedBytes: 900, FillRate: -5, RateIntervalNs: int64(time.Minute)})
	// An older agent: no figures, no alert, whatever its backlog.
	status(d2, true, nil)
	waitFor(t, func() bool {
		a, ok := alerts()["full/device=b1"]
		return ok && a.State == rules.Firing && a.Value == 0.9
	})
	// 10% full, filling 1000 bytes in 100 s at 9 B/s: time to full fires.
	status(d1, true, &wirepb.BufferFill{CapacityBytes: 100_000, UsedBytes: 10_000, FillRate: 900, RateIntervalNs: int64(time.Minute)})
	waitFor(t, func() bool {
		m := alerts()
		return m["full/device=b1"].State == rules.Resolved && m["soon/device=b1"].State == rules.Firing
	})
	// A last will with stale figures changes nothing for buffer rules.
	status(d1, false, &wirepb.BufferFill{CapacityBytes: 100_000, UsedBytes: 0})
	// 99% full but 1,000 s from full: a new ratio episode, the time to
	// full resolves.
	status(d1, true, &wirepb.BufferFill{CapacityBytes: 100_000, UsedBytes: 99_000, FillRate: 1})
	waitFor(t, func() bool {
		as, _, _ := s1.Alerts(rules.Filter{Rule: "full", State: rules.Firing})
		return len(as) == 1 && as[0].Value == 0.99
	})
	as, _, err := s1.Alerts(rules.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var firing, resolved []string
	for _, a := range as {
		if a.Group != "device=b1" || a.FiredAt.IsZero() || a.FiredAt.Before(a.Start) {
			t.Fatalf("alert %+v: want b1's, fired at its status", a)
		}
		if a.State == rules.Firing {
			firing = append(firing, a.Rule)
		} else {
			resolved = append(resolved, a.Rule)
		}
	}
	if len(firing) != 1 || firing[0] != "full" || len(resolved) != 2 {
		t.Fatalf("alerts %+v: want full firing, an earlier full and soon resolved, nothing for b2", as)
	}
	if info, ok := s1.Device("b2"); !ok || !info.Online {
		t.Fatalf("b2's status not applied: %+v", info)
	}
	_, want := getJSON(t, s1.Handler(), "/v1/alerts", nil)

	s1.skipFinalCheckpoint = true
	if err := s1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := startHub(t, opts())
	if _, got := getJSON(t, s2.Handler(), "/v1/alerts", nil); !bytes.Equal(got, want) {
		t.Fatalf("alerts differ after the crash:\n before %s\n after  %s", want, got)
	}
}
