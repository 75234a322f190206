#!/bin/bash
# Measures the edge agent's footprint: resident memory of a running agent
# (low-memory profile unless PROFILE says otherwise) that holds EVENTS
# buffered events while its hub is unreachable. Events are posted as NDJSON
# over HTTP, 1000 per request, 8 requests at a time. Prints peak (VmHWM)
# and current RSS split into anonymous and file-backed (mmapped Badger
# tables, page cache the kernel can reclaim), after the fill and after
# IDLE seconds. Extra arguments go to edgeagent.
#
#   scripts/footprint.sh                       # 1,000,000 events, low-memory
#   EVENTS=200000 PROFILE=default scripts/footprint.sh --memory-limit off
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-1000000}
PROFILE=${PROFILE:-low-memory}
IDLE=${IDLE:-20}
PORT=${PORT:-18281}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
BIN=${BIN:-$work/edgeagent}
[ -x "$BIN" ] || CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN" ./cmd/edgeagent
"$BIN" --device-id footprint --data-dir "$work/data" --listen "127.0.0.1:$PORT" --udp-listen off \
	--mqtt-url tcp://127.0.0.1:9 --ntp-servers "" --time-hub=false --profile "$PROFILE" \
	--log-level warn "$@" 2>"$work/agent.log" &
pid=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
for i in $(seq 1000); do printf '{"metric":"sensor.temp","value":%d.5,"tags":{"room":"a"}}\n' "$i"; done >"$work/body"
mem() {
	awk '/^(VmHWM|VmRSS|RssAnon|RssFile):/ {printf "%s %d MiB  ", $1, $2/1024}' "/proc/$pid/status"
	echo
}
start=$(date +%s)
seq $((EVENTS / 1000)) | xargs -P 8 -I{} curl -sf -o /dev/null -XPOST --data-binary "@$work/body" "127.0.0.1:$PORT/v1/events"
depth=$(curl -sf "127.0.0.1:$PORT/v1/status" | sed -E 's/.*"depth":([0-9]+).*/\1/')
echo "profile=$PROFILE events=$depth fill=$(($(date +%s) - start))s disk=$(du -sh "$work/data" | cut -f1)"
echo "after fill: $(mem)"
sleep "$IDLE"
echo "idle ${IDLE}s:  $(mem)"
