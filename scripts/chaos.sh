#!/usr/bin/env bash
# Chaos suite (docs/THREAT_MODEL.md): hubd SIGKILLs, agent SIGKILLs, broker
# restarts, a proxy that cuts and stalls the agent-broker link, the hub's
# disk filling up (a tmpfs, when run as root), an agent buffer at its bound
# and device clock steps; then compares every window (count, sum, min,
# max, last, p50/p95/p99) with the ground truth and prints the result
# table ("mismatching windows" must be 0). Bounded: about 2-3 minutes on 2
# cores, 10 at most. Needs mosquitto.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet -tags chaos ./e2e
exec go test -tags chaos ./e2e -run '^TestChaos$' -count=1 -timeout 10m -v "$@"
