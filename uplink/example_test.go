package uplink_test

import (
	"context"
	"log"
	"time"

	"edgeflow/buffer"
	"edgeflow/uplink"
)

// An agent opens its buffer, creates one Uplink for its stream and runs it
// until shutdown; its ingest calls Notify after each append.
func ExampleNew() {
	store, err := buffer.Open("/var/lib/edgeflow/buffer", buffer.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	stream, err := store.Stream("dev-42", buffer.StreamOptions{})
	if err != nil {
		log.Fatal(err)
	}
	u, err := uplink.New(stream, uplink.Options{
		DeviceID: "dev-42",
		Brokers:  []string{"ssl://hub.example.com:8883"},
		TLS:      uplink.TLSOptions{CAFile: "/etc/edgeflow/ca.pem"},
		Linger:   200 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := u.Run(ctx); err != nil {
			log.Print(err)
		}
	}()
	// ... stream.Append(...); u.Notify() ...
	_ = u.Status() // for GET /v1/status
}
