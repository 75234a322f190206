// Package clocksync tells the edge agent how wrong its clock is and how sure
// it is, and turns a device time into an event time.
//
// # Model
//
// A Clock does not estimate "true time minus wall clock" directly. It
// estimates the true Unix time at which the monotonic clock (CLOCK_BOOTTIME,
// which never steps and keeps counting through suspend) read zero, as a line
// over monotonic time:
//
//	true(mono) = mono + boot(mono),  boot(mono) = boot0 + drift*(mono - mono0)
//
// Every sample, whether from an NTP server or from the hub's time service,
// is a point on that line with a hard error bound (half the round-trip
// delay plus the server's own root distance). The offset of the wall clock
// is derived at the moment it is asked for: Offset = true(mono) - wall. So a
// wall-clock step (someone ran date, the RTC was reset) cannot corrupt the
// estimate: the step is detected by comparing wall against monotonic
// progress, logged and counted, and the next Offset already includes it.
// Samples taken across a step (an exchange that straddles it) are
// discarded. A step of the time source itself (every server jumps) shows
// as rounds that are inconsistent with the fitted line; after
// Options.StepConfirm such rounds in a row, the samples from before the
// step are discarded and the fit restarts from the new ones.
//
// # Estimation
//
// Each round queries every configured NTP server concurrently, validates
// the answers (ntp.Response.Validate: stratum, leap indicator, kiss codes,
// dispersion; plus a delay limit), and selects the servers whose error
// intervals intersect in a majority (Marzullo's algorithm; a lying server
// among three is outvoted). When no NTP server answers and a HubExchanger
// is configured, the round asks the hub instead, with the same four
// timestamps, and its samples go to the same estimator.
//
// The estimator keeps a bounded window of samples, keeps the lowest-delay
// half of them (the idea of NTP's clock filter and chrony's sample
// selection), and fits the line by weighted least squares (weights
// 1/bound^2), which gives the offset and the drift. The uncertainty at any
// monotonic time m is
//
//	min over samples i of  bound_i + |residual_i| + |m - m_i| * rho
//
// where rho is Options.DriftBoundPPM plus the drift's own error while the
// drift is known, and Options.MaxDriftPPM before it is. The uncertainty
// therefore widens with time since the last good sample, and an offline
// device stops claiming precision it has lost.
//
// # Repair
//
// Every event records its device time, its monotonic time and the boot id
// (Stamp, StampEvent). An event captured while the clock was untrusted is
// re-timed through its monotonic time once a trustworthy estimate exists in
// the same boot (Correct, RepairEvent, method REPAIRED). An event from
// another boot, or one whose uncertainty would exceed
// Options.MaxUncertainty, stays UNTRUSTED: it keeps its raw device time and
// is never silently given a wrong one.
//
// A correction the estimate cannot tell from zero (|offset| <=
// uncertainty) is not applied: the event keeps its device time, with the
// uncertainty grown by the offset left out, so a right clock's events on
// a window boundary stay in their window.
//
// # Restarts
//
// With Options.StatePath, the window of samples is saved with the boot id
// and restored by a later Clock of the same boot: its monotonic times
// still lie on the same line, and the fit's uncertainty has grown by the
// drift bound since the newest sample. A state from another boot, or one
// that cannot be read, is logged and ignored.
package clocksync
