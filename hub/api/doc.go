// Package api is the hub's HTTP API: /healthz, /readyz, /metrics, the
// device endpoints, the query endpoints over the aggregate engine
// (/v1/aggregates, /v1/events, /v1/stream, /v1/late, /v1/quarantine,
// /v1/partials; docs/openapi.yaml), the dashboard, the gate that bounds
// the expensive queries running at once, and Guard, the bearer-token and
// body-size check in front of them all. Settings checks the hub's HTTP
// options.
//
// With a Cluster (cluster.go), a hub that shares the fleet's partitions
// with others answers for the whole fleet: it fans out to the owners
// (local=1), accepts only answers for current epochs, merges them exactly,
// and says which partitions were missing (docs/CLUSTER.md, "One answer from
// any hub").
//
// The handlers read the hub through Backend, a small interface that
// *hub.Server implements, and the engine through Config; their JSON types
// are in package hubapi. This package imports nothing of the hub.
package api
