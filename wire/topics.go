package wire

import (
	"fmt"
	"strings"
)

// TopicPrefix is the root of every topic of protocol version 1.
const TopicPrefix = "edge/v1/"

// Topic kinds: the last levels of edge/v1/{device}/...
const (
	KindBatch    = "batch"
	KindAck      = "ack"
	KindStatus   = "status"
	KindTimeReq  = "time/req"
	KindTimeResp = "time/resp"
)

// Topic returns edge/v1/{device}/{kind}.
func Topic(device, kind string) string { return TopicPrefix + device + "/" + kind }

// BatchTopic is where an agent publishes its batches (QoS 1).
func BatchTopic(device string) string { return Topic(device, KindBatch) }

// AckTopic is where the hub answers a device's batches.
func AckTopic(device string) string { return Topic(device, KindAck) }

// StatusTopic carries a device's retained status and last will.
func StatusTopic(device string) string { return Topic(device, KindStatus) }

// TimeReqTopic is where a device asks the hub for the time.
func TimeReqTopic(device string) string { return Topic(device, KindTimeReq) }

// TimeRespTopic is where the hub answers a device's time requests.
func TimeRespTopic(device string) string { return Topic(device, KindTimeResp) }

// Subscription filters a hub uses for every device.
const (
	AllBatches  = TopicPrefix + "+/" + KindBatch
	AllStatus   = TopicPrefix + "+/" + KindStatus
	AllTimeReqs = TopicPrefix + "+/" + KindTimeReq
)

// ParseTopic splits edge/v1/{device}/{kind} and validates the device id.
func ParseTopic(topic string) (device, kind string, err error) {
	rest, ok := strings.CutPrefix(topic, TopicPrefix)
	if !ok {
		return "", "", fmt.Errorf("topic %q does not start with %q", topic, TopicPrefix)
	}
	device, kind, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", fmt.Errorf("topic %q has no kind after the device", topic)
	}
	if err := ValidateDeviceID(device); err != nil {
		return "", "", fmt.Errorf("topic %q: %w", topic, err)
	}
	switch kind {
	case KindBatch, KindAck, KindStatus, KindTimeReq, KindTimeResp:
		return device, kind, nil
	}
	return "", "", fmt.Errorf("topic %q: unknown kind %q", topic, kind)
}
