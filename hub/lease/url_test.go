package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"edgeflow/hub/lease"
)

// TestCheckURL: an advertised URL is an absolute http(s) URL with a host,
// bounded, of bytes that JSON writes as they are, without credentials,
// query or fragment; the error names what is wrong.
func TestCheckURL(t *testing.T) {
	for _, u := range []string{"http://hub-a:8080", "https://10.0.0.7:8443", "http://[fe80::1]:8080",
		"https://edge.example.com/hub-a", "http://h/" + strings.Repeat("a", lease.MaxURL-9)} {
		if err := lease.CheckURL(u); err != nil {
			t.Errorf("%q: %v", u, err)
		}
	}
	for u, want := range map[string]string{
		"":                     "http",
		"hub-a:8080":           "http",
		"ftp://hub-a":          "http",
		"http://":              "no host",
		"http://:8080":         "no host",
		"http://user:pw@hub-a": "user information",
		"http://hub-a/?x=1":    "query",
		"http://hub-a/#f":      "fragment",
		"http://hub a":         "not allowed",
		"http://hub-a/<x>":     "not allowed",
		"http://hub-a/\u00e9":  "not allowed",
		"http://h/" + strings.Repeat("a", lease.MaxURL): "bytes",
	} {
		err := lease.CheckURL(u)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", u, err, want)
		}
	}
}

// TestAdvertisedURL: each hub's heartbeat carries its Options.URL and
// every hub's Status reports each live hub's; an invalid URL is refused
// by Open naming the field.
func TestAdvertisedURL(t *testing.T) {
	const parts = 4
	c := startNATS(t)
	urls := map[string]string{"a": "http://127.0.0.1:18080", "b": "https://hub-b.example:8443/edge", "c": ""}
	var hubs []*hub
	for _, id := range []string{"a", "b", "c"} {
		hubs = append(hubs, startHub(t, c.URLs(), id, parts, func(o *lease.Options) { o.URL = urls[id] }))
	}
	for _, h := range hubs {
		waitFor(t, h.id+" to see every hub's URL", func() bool {
			st := h.m.Status()
			if len(st.Hubs) != len(urls) {
				return false
			}
			for i, hs := range st.Hubs {
				if hs.ID != st.Members[i] || hs.URL != urls[hs.ID] {
					return false
				}
			}
			return true
		})
	}
	_, js := connect(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, err := lease.Open(ctx, js, lease.Options{HubID: "d", Partitions: parts, TTL: testTTL, Renew: testRenew, Replicas: 1, URL: "hub-d:8080"})
	if !errors.Is(err, lease.ErrInvalidOption) || !strings.Contains(err.Error(), "URL") {
		t.Fatalf("Open with a relative URL: %v", err)
	}
}
