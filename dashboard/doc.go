// Package dashboard holds hubd's web dashboard: plain HTML, CSS and
// JavaScript embedded in the binary (hubs often run offline, so nothing
// is loaded from elsewhere). The page reads only the hub's public HTTP
// API: GET /v1/devices for the fleet table, /v1/aggregates and the
// server-sent events of /v1/stream for the live window chart (provisional,
// final and revised windows), /metrics for ingest throughput, /v1/late
// for the late-events log, and GET /v1/alerts?state=firing with the
// stream's alert events for the firing alerts.
//
// The hub mounts Handler at "/" (the page) and "/dashboard/" (its assets);
// the page refers to its assets by relative paths, so it also works behind
// a reverse proxy that serves the hub under a path prefix.
package dashboard
