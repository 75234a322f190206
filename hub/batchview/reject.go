package batchview

import (
	"errors"
	"fmt"

	"edgeflow/wire"
)

// Reason classifies why a batch was rejected. It is the label of the
// rejection counter and the first word of the ack's reason text, so agents
// and dashboards can branch on it.
type Reason string

// Rejection reasons.
const (
	ReasonMalformed      Reason = "malformed"           // not a valid frame or batch
	ReasonTooLarge       Reason = "too_large"           // a size or count exceeds the limits
	ReasonVersion        Reason = "unsupported_version" // unknown schema version
	ReasonDeviceMismatch Reason = "device_mismatch"     // device in payload differs from the topic
	ReasonStreamID       Reason = "bad_stream_id"       // stream id is not 16 bytes
	ReasonNoEvents       Reason = "no_events"           // a batch must carry at least one event
	ReasonFirstSeq       Reason = "bad_first_seq"       // first_seq is 0
	ReasonSeqOverflow    Reason = "seq_overflow"        // first_seq + count overflows
	ReasonSeqAhead       Reason = "seq_ahead"           // too far beyond what the stream has sent
	ReasonFragmented     Reason = "too_fragmented"      // the stream's applied ranges would exceed the bound
	ReasonTime           Reason = "bad_time"            // a timestamp is outside sane bounds
	ReasonValue          Reason = "bad_value"           // NaN or infinite value
	ReasonMetric         Reason = "bad_metric"          // empty metric name, or not valid UTF-8
	ReasonTag            Reason = "bad_tag"             // a tag key or value not valid UTF-8
	ReasonMethod         Reason = "bad_method"          // unknown time method
	ReasonGap            Reason = "bad_gap"             // a gap range is empty or inverted
	ReasonInternal       Reason = "internal_error"      // the hub failed (a recovered panic)
)

// Rejection reasons of the per-device limits and the broker's identities.
const (
	ReasonRateLimited      Reason = "rate_limited"      // the device is over its events per second (acked RETRY_LATER)
	ReasonIdentityMismatch Reason = "identity_mismatch" // published by another device than the topic names (not acked)
	ReasonTooManyStreams   Reason = "too_many_streams"  // the device already holds MaxStreamsPerDevice streams (acked RETRY_LATER)
)

// allReasons lists every Reason, so the counter shows zeros from the start.
var AllReasons = [...]Reason{
	ReasonMalformed, ReasonTooLarge, ReasonVersion, ReasonDeviceMismatch, ReasonStreamID,
	ReasonNoEvents, ReasonFirstSeq, ReasonSeqOverflow, ReasonSeqAhead, ReasonFragmented,
	ReasonTime, ReasonValue, ReasonMetric, ReasonTag, ReasonMethod, ReasonGap, ReasonInternal,
	ReasonRateLimited, ReasonIdentityMismatch, ReasonTooManyStreams,
}

// Rejection is the error for a batch that the hub refuses; the agent gets
// it as an ack with status REJECTED (RETRY_LATER when Retry says so) and
// AckReason() as the reason.
type Rejection struct {
	Reason Reason
	Detail string
}

// Retry reports whether the refusal is transient: nothing is wrong with
// the batch, the agent must keep it and send it again later (status
// RETRY_LATER), so a device over its rate limit, or at its bound of
// streams, loses nothing.
func (r *Rejection) Retry() bool {
	return r.Reason == ReasonRateLimited || r.Reason == ReasonTooManyStreams
}

// Error returns the detail, so wrapping it adds context naturally.
func (r *Rejection) Error() string { return r.Detail }

// AckReason is the text sent to the agent: "reason: detail".
func (r *Rejection) AckReason() string { return string(r.Reason) + ": " + r.Detail }

// reject builds a *Rejection.
func Reject(reason Reason, format string, args ...any) error {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// malformed builds a ReasonMalformed rejection.
func malformed(format string, args ...any) error {
	return Reject(ReasonMalformed, format, args...)
}

// AsRejection classifies err: a *Rejection anywhere in the chain, or a wire
// decode error, or else malformed.
func AsRejection(err error) *Rejection {
	var r *Rejection
	if errors.As(err, &r) {
		if msg := err.Error(); msg != r.Detail {
			return &Rejection{Reason: r.Reason, Detail: msg}
		}
		return r
	}
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		return &Rejection{Reason: ReasonTooLarge, Detail: err.Error()}
	case errors.Is(err, wire.ErrVersion):
		return &Rejection{Reason: ReasonVersion, Detail: err.Error()}
	}
	return &Rejection{Reason: ReasonMalformed, Detail: err.Error()}
}
