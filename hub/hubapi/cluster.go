package hubapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"edgeflow/aggregate"
)

// PartitionsHeader names the partitions (with their epochs) a hub's answer
// to a local=1 request covers: "3:17,5:2" is partition 3 at epoch 17 and
// partition 5 at epoch 2. A hub merging peers' answers accepts one only
// when every partition it names is that peer's at that epoch in its own
// view of the cluster, so a stale owner's answer is never merged.
const PartitionsHeader = "Edgeflow-Partitions"

// LocalParam is the query parameter that asks a hub of a cluster for its
// own partitions only. A request carrying it never fans out again, which
// keeps two hubs from asking each other in a loop.
const LocalParam = "local"

// maxHeaderPartitions bounds the partitions one Edgeflow-Partitions header
// may name (a stream's partition count is far below it).
const maxHeaderPartitions = 1 << 16

// FormatPartitions writes owned (partition -> epoch) as an
// Edgeflow-Partitions header value, partitions ascending.
func FormatPartitions(owned map[int]uint64) string {
	ps := make([]int, 0, len(owned))
	for p := range owned {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(p))
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(owned[p], 10))
	}
	return b.String()
}

// ParsePartitions reads an Edgeflow-Partitions header value. An empty
// value is no partition; a malformed one, a partition named twice, or more
// than 65,536 of them is an error saying what is wrong.
func ParsePartitions(s string) (map[int]uint64, error) {
	out := map[int]uint64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	items := strings.Split(s, ",")
	if len(items) > maxHeaderPartitions {
		return nil, fmt.Errorf("%s names %d partitions, more than %d", PartitionsHeader, len(items), maxHeaderPartitions)
	}
	for _, it := range items {
		ps, es, ok := strings.Cut(strings.TrimSpace(it), ":")
		p, err1 := strconv.Atoi(ps)
		e, err2 := strconv.ParseUint(es, 10, 64)
		if !ok || err1 != nil || err2 != nil || p < 0 {
			return nil, fmt.Errorf("%s: %q is not partition:epoch", PartitionsHeader, it)
		}
		if _, dup := out[p]; dup {
			return nil, fmt.Errorf("%s: partition %d named twice", PartitionsHeader, p)
		}
		out[p] = e
	}
	return out, nil
}

// PeerPartials is one peer's answer to a local=1 /v1/partials request: its
// partial set and the partitions (with epochs) the set covers.
type PeerPartials struct {
	Hub        string
	Set        *aggregate.PartialSet
	Partitions map[int]uint64
}

// FetchPeerPartials is FetchPartials for a hub of a cluster asking a peer:
// it sends local=1, so the peer answers from its own partitions only, and
// reads the Edgeflow-Partitions header that names them. A missing or
// malformed header is an error: an answer that does not say what it
// covers cannot be merged safely.
func FetchPeerPartials(ctx context.Context, client *http.Client, hub, baseURL, token string, q aggregate.Query, from, to time.Time) (*PeerPartials, error) {
	extra := url.Values{LocalParam: {"1"}}
	ps, h, err := fetchPartialsWith(ctx, client, baseURL, token, q, from, to, extra)
	if err != nil {
		return nil, err
	}
	raw, ok := h[http.CanonicalHeaderKey(PartitionsHeader)]
	if !ok || len(raw) != 1 {
		return nil, fmt.Errorf("partials from %s: no single %s header: the hub is not in a cluster or too old", baseURL, PartitionsHeader)
	}
	parts, err := ParsePartitions(raw[0])
	if err != nil {
		return nil, fmt.Errorf("partials from %s: %w", baseURL, err)
	}
	return &PeerPartials{Hub: hub, Set: ps, Partitions: parts}, nil
}

// PartialsRange is the range of partials the windows of q need: a window
// reaches past q.To by its size, a session by up to a day either side
// (QueryHubs and a cluster's merge use it alike).
func PartialsRange(q aggregate.Query) (from, to time.Time) {
	if q.Window.Kind == aggregate.Session {
		return q.From.Add(-q.Window.Gap), q.To.Add(maxSessionReach)
	}
	return q.From, q.To.Add(q.Window.Size)
}

// MergePartials answers q from several partitions' partial sets exactly,
// as one hub holding all their events would (aggregate.QueryPartials).
// With no set at all (every partition missing) the answer is no window.
// When partial is true some partitions are missing, so no window can be
// known final: every window's Final is cleared.
func MergePartials(sets []*aggregate.PartialSet, q aggregate.Query, partial bool) ([]aggregate.WindowResult, error) {
	if len(sets) == 0 {
		return nil, nil
	}
	// The owners left out other devices' series already (see QueryHubs).
	q.Device = ""
	res, err := aggregate.QueryPartials(sets, q)
	if err != nil {
		return nil, err
	}
	if partial {
		for i := range res {
			res[i].Final = false
		}
	}
	return res, nil
}

// ClusterStatus is the body of GET /v1/cluster: the hubs of a cluster and
// the partitions of the stream, as the answering hub sees them.
type ClusterStatus struct {
	// Self is the answering hub's id.
	Self string `json:"self"`
	// Partitions is the stream's partition count.
	Partitions int          `json:"partitions"`
	Hubs       []ClusterHub `json:"hubs"`
	// PartitionStates has one entry per partition, ascending.
	PartitionStates []ClusterPartition `json:"partition_states"`
}

// ClusterHub is one hub of the cluster.
type ClusterHub struct {
	ID      string `json:"id"`
	BaseURL string `json:"base_url"`
	// Owned lists the partitions the hub holds leases of, ascending.
	Owned []int `json:"owned"`
}

// ClusterPartition is one partition: its owner (empty when no hub holds
// its lease), the lease's epoch and expiry, and how far its owner's
// applying lags the stream. StreamLast, Applied and Lag are nil (absent
// in JSON) when not known to the answering hub: Applied and Lag are
// known for the partitions it owns itself (ask the owner's /v1/cluster
// for the others').
type ClusterPartition struct {
	Partition   int       `json:"partition"`
	Owner       string    `json:"owner,omitempty"`
	Epoch       uint64    `json:"epoch,omitempty"`
	LeaseExpiry time.Time `json:"lease_expiry,omitzero"`
	// StreamLast is the partition's last stream sequence and Applied the
	// last one its owner applied; Lag is their difference (a sequence
	// distance, not a message count; 0 when Applied is ahead of a
	// StreamLast read earlier).
	StreamLast *uint64 `json:"stream_last,omitempty"`
	Applied    *uint64 `json:"applied,omitempty"`
	Lag        *uint64 `json:"lag,omitempty"`
}
