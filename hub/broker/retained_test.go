package broker

import (
	"testing"

	"edgeflow/wire"
)

func TestRetainRules(t *testing.T) {
	for _, c := range []struct {
		topic string
		size  int
		why   string
	}{
		{wire.StatusTopic("dev-1"), 100, ""},
		{wire.StatusTopic("dev-1"), DefaultMaxRetainedBytes, ""},
		{wire.StatusTopic("dev-1"), 0, ""}, // clears the retained status
		{wire.StatusTopic("dev-1"), DefaultMaxRetainedBytes + 1, retainTooLarge},
		{wire.BatchTopic("dev-1"), 10, retainNotStatus},
		{wire.AckTopic("dev-1"), 10, retainNotStatus},
		{"edge/v1/dev-1/status/x", 10, retainNotStatus},
		{"edge/v1/bad id/status", 10, retainNotStatus},
		{"any/topic", 10, retainNotStatus},
	} {
		if why := retainRefusal(c.topic, c.size, DefaultMaxRetainedBytes); why != c.why {
			t.Errorf("%s (%d bytes): %q, want %q", c.topic, c.size, why, c.why)
		}
	}
	for topic, want := range map[string]bool{
		wire.AckTopic("dev-1"): true, wire.TimeRespTopic("dev-1"): true, "edge/v1/anything at all/ack": true,
		wire.BatchTopic("dev-1"): false, wire.StatusTopic("dev-1"): false, wire.TimeReqTopic("dev-1"): false,
		"edge/v1/a/b/ack": false, "edge/v2/dev-1/ack": false, "ack": false,
	} {
		if got := hubOnlyTopic(topic); got != want {
			t.Errorf("hubOnlyTopic(%q) = %v", topic, got)
		}
	}
}
