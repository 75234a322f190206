package natslog

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"edgeflow/wire"
)

// BatchSubjects is the subject filter of every device's batches: the MQTT
// topic wire.AllBatches (edge/v1/+/batch) as NATS spells it.
const BatchSubjects = "edge.v1.*.batch"

// LogPrefix is the first two tokens of every subject stored in the
// stream: edgeflow.log.{partition}.{device token}.
const LogPrefix = "edgeflow.log"

// transformDest is the stream's subject transform destination for n
// partitions: the partition of the first wildcard (the device token),
// then the token itself.
func transformDest(n int) string {
	return fmt.Sprintf("%s.{{partition(%d,1)}}.{{wildcard(1)}}", LogPrefix, n)
}

// DeviceToken is the NATS subject token of a device id, as NATS' MQTT
// listener writes the topic level: each '.' becomes "//".
func DeviceToken(device string) string { return strings.ReplaceAll(device, ".", "//") }

// deviceFromToken reverses DeviceToken and checks the id.
func deviceFromToken(token string) (string, error) {
	device := strings.ReplaceAll(token, "//", ".")
	if err := wire.ValidateDeviceID(device); err != nil {
		return "", err
	}
	return device, nil
}

// BatchSubject is the subject a device's batches arrive on.
func BatchSubject(device string) string { return "edge.v1." + DeviceToken(device) + ".batch" }

// PartitionOf is the partition of device among n, the same function the
// server's {{partition(n,1)}} transform applies to the device's token:
// FNV-1a (32 bit) of the token, modulo n.
func PartitionOf(device string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(DeviceToken(device)))
	return int(h.Sum32() % uint32(n))
}

// PartitionFilter is the subject filter of one partition's messages.
func PartitionFilter(partition int) string {
	return LogPrefix + "." + strconv.Itoa(partition) + ".*"
}

// parseLogSubject splits edgeflow.log.{partition}.{token} into the
// partition and the device id.
func parseLogSubject(subject string) (int, string, error) {
	rest, ok := strings.CutPrefix(subject, LogPrefix+".")
	if !ok {
		return 0, "", fmt.Errorf("%w: %q lacks prefix %s", ErrBadSubject, subject, LogPrefix)
	}
	ps, token, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(token, ".") {
		return 0, "", fmt.Errorf("%w: %q: want %s.{partition}.{device}", ErrBadSubject, subject, LogPrefix)
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 0 || p >= maxPartitions || strconv.Itoa(p) != ps {
		return 0, "", fmt.Errorf("%w: %q: partition %q", ErrBadSubject, subject, ps)
	}
	device, err := deviceFromToken(token)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q: %v", ErrBadSubject, subject, err)
	}
	return p, device, nil
}
