// Package simulator runs a fleet of virtual devices in one process against
// a hub, each with the real agent pipeline: a stream in one shared buffer
// store (Badger), a clocksync estimator fed by the device's simulated
// clocks, and an uplink with its own MQTT connection. It knows every
// event's true time and value, so it computes the aggregates the hub
// should report, and Verify checks the hub's answers against them.
//
// # Models
//
// A device's clock (DeviceClock) is a function of the true time: one
// oscillator off by a drift drives the monotonic and the wall clock; the
// wall clock starts at an offset, can be stepped, and a power loss reboots
// the device with a new boot id and the wall clock at 1970. Its time
// source is an in-process NTP server that tells the true time (through
// clocksync.Options.Dialer, no sockets), the hub's time service over a
// second MQTT connection, or nothing (events go UNTRUSTED; the hub applies
// its own estimate). Time sources fail while the link is down.
//
// Link outages, hub outages, agent crashes and power losses follow a
// Timeline drawn per device from the scenario. A link outage closes the
// device's uplink (offline status, clean DISCONNECT) and opens a new one
// when the link returns, which connects at once; events keep being
// captured into the buffer meanwhile. A hub outage (Scenario.HubOutage)
// leaves agents and uplinks running: the uplinks dial through the link
// model (uplink.Options.Dial), which cuts their live connections at once,
// without a DISCONNECT, and refuses every dial until the outage ends, so
// each uplink reconnects through its own backoff with full jitter. A crash
// restarts clocksync and captures nothing while the agent is down; unless
// CrashSpec.Graceful, it and a power loss drop the uplink's connection the
// same way, so the broker publishes the agent's last will, and the batches
// in flight are forgotten with the uplink: the next agent life resends
// from the buffer. The shared store stays open throughout, so a crash
// loses nothing the agent had appended (a process-level crash, SIGKILL of
// the agent with its store, is covered by the e2e tests, not here). A
// power loss drops the connection as a crash does, which the broker sees
// at once; a real one would go silent and be found out by the broker's
// keep-alive.
//
// # One store for the fleet
//
// The devices' buffers are streams of one store, which syncs for all of
// them at once (Scenario.Buffer.SyncInterval). Records become readable,
// and so sent, only after the sync that makes them durable, so every sync
// releases what the whole fleet captured since the last one: at the
// buffer's default 100 ms and 10,000 devices of one event a second, 1,000
// batches at the same instant, where real devices, each with a timer of
// its own, would spread them evenly. A shorter interval spreads the
// fleet's traffic as independent devices would, but each event then waits
// up to that interval for its sync instead of up to a device's own.
//
// # Time scale
//
// Scenario.TimeScale divides every duration that describes the run (its
// length, outage, crash and power-loss times, clock steps) but not event
// rates, drifts or Preload: events are stamped in real time, so the hub's
// server clock, watermarks and windows work unchanged. A compressed
// one-hour outage therefore leaves a backlog of one compressed hour of
// events; to test a real hour of backlog, use DeviceClass.Preload, which
// appends that history (true times in the past) before the uplinks start.
//
// # Ground truth
//
// Events are captured only outside Scenario.BoundaryGuard of a resolution
// boundary, so a correction error below the guard cannot move an event
// across a window edge; an Unguarded class (right clocks, which the agent
// leaves uncorrected) captures on the boundaries too. An event stamped with a trusted correction at
// capture counts in the truth at its true time. An event captured
// untrusted is repaired later or timed by the hub's estimate, which the
// simulator cannot predict; so is an event whose stamped time falls in
// another bucket than its true time while within the stamp's uncertainty.
// A device with such events has its windows reported as unverifiable (its
// events still count in the loss check).
package simulator
