package natslog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// PartitionLastSeq returns the stream sequence of partition p's last
// message, 0 when the stream holds none of it. A hub compares it with
// its own position to know whether it has caught up with the stream.
func (l *Log) PartitionLastSeq(ctx context.Context, p int) (uint64, error) {
	if p < 0 || p >= l.opts.Partitions {
		return 0, fmt.Errorf("%w: partition %d: want 0..%d", ErrInvalidOption, p, l.opts.Partitions-1)
	}
	m, err := l.stream.GetLastMsgForSubject(ctx, PartitionFilter(p))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("natslog: last message of partition %d: %w", p, err)
	}
	return m.Sequence, nil
}
