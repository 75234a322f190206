package clocksync_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"edgeflow/clocksync"
	"edgeflow/wire/wirepb"
)

// The agent runs one Clock, stamps every event at capture and repairs the
// untrusted ones when it builds a batch. (Not run by go test: it would
// query the internet.)
func Example() {
	clk, err := clocksync.New(clocksync.Options{
		Servers: []string{"0.pool.ntp.org", "1.pool.ntp.org", "2.pool.ntp.org"},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = clk.Run(ctx) }() // owned by the agent's errgroup in real code

	// At capture.
	ev := &wirepb.Event{Metric: "temp", Value: 21.5}
	clk.StampEvent(ev)

	// At send time: events captured before the clock was trusted are
	// re-timed through their monotonic time if they are of this boot.
	clk.RepairEvent(ev)
	eventTime := time.Unix(0, ev.DeviceTimeNs+ev.OffsetNs)
	fmt.Println(eventTime, ev.Method, clk.Estimate().Uncertainty)
}
