// Package hubapi holds the JSON types of the hub's HTTP API and the helpers
// a client needs to read and merge its answers (ParseQueryTime, SplitList,
// WindowsJSON, FetchPartials, QueryHubs; for hubs of a cluster,
// FetchPeerPartials, MergePartials and the Edgeflow-Partitions header), so that a client such as
// `hubd query` reads parameters and writes windows exactly as
// GET /v1/aggregates does, without importing the hub, its store or its
// broker (deps_test.go holds that).
package hubapi
