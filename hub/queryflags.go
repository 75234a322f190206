package hub

import (
	"time"

	"edgeflow/aggregate"
)

// Helpers for clients of the query API (such as `hubd query`, which merges
// several hubs with QueryHubs), so that they read parameters and write
// windows exactly as GET /v1/aggregates does.

// ParseQueryTime reads a time the way the query API reads from and to: RFC
// 3339 (2025-06-01T12:00:00Z) or an integer of Unix milliseconds, within
// the years 2000 to 2200. A bad value is an *aggregate.ParamError naming
// param.
func ParseQueryTime(param, s string) (time.Time, error) { return parseAPITime(param, s) }

// WindowsJSON converts query results (of an engine, or of QueryHubs) to
// the windows of GET /v1/aggregates: only the aggregates in aggs are set
// (pass what aggregate.ParseAggs returns; unlike a query's, zero Aggs here
// sets none but count).
func WindowsJSON(res []aggregate.WindowResult, aggs aggregate.Aggs) []WindowJSON {
	return windowsJSON(res, aggs)
}
