#!/bin/bash
# Measures the edge agent's footprint: resident memory of a running agent
# (low-memory profile unless PROFILE says otherwise) that holds EVENTS
# buffered events while its hub is unreachable. Events are posted as NDJSON
# over HTTP, 1000 per request, 8 requests at a time. Prints peak (VmHWM)
# and current RSS split into anonymous and file-backed (the binary's own
# pages, and Badger's mmapped tables and logs), after the fill and after
# IDLE seconds, and the peaks of each sampled during the fill. Extra
# arguments go to edgeagent.
#
#   scripts/footprint.sh                       # 1,000,000 events, low-memory
#   EVENTS=200000 PROFILE=default scripts/footprint.sh --memory-limit off
#   scripts/footprint.sh --buffer-compression none  # blocks as before s2
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
# 16 request bodies of 1000 events: 4 metrics, 8 rooms, random values with
# three decimals, so block compression sees data about as varied as a real
# sensor's, not one line repeated.
for b in $(seq 0 15); do
	awk -v seed="$b" 'BEGIN { srand(seed); split("temp humidity pressure co2", m, " ")
		for (i = 0; i < 1000; i++) printf "{\"metric\":\"sensor.%s\",\"value\":%.3f,\"tags\":{\"room\":\"r%d\",\"floor\":\"%d\"}}\n",
			m[i % 4 + 1], rand() * 1000, int(rand() * 8), i % 3 }' >"$work/body$b"
done
mem() {
	awk '/^(VmHWM|VmRSS|RssAnon|RssFile):/ {printf "%s %d MiB  ", $1, $2/1024}' "/proc/$pid/status"
	echo
}
# Peak anonymous and file-backed RSS, sampled every 100 ms during the fill.
(while kill -0 "$pid" 2>/dev/null; do
	awk '/^(RssAnon|RssFile):/ {printf "%d ", $2}' "/proc/$pid/status" 2>/dev/null && echo
	sleep 0.1
done >"$work/samples") &
start=$(date +%s)
seq 0 $((EVENTS / 1000 - 1)) | xargs -P 8 -I{} sh -c 'curl -sf -o /dev/null -XPOST --data-binary "@$0/body$(({} % 16))" "127.0.0.1:$1/v1/events"' "$work" "$PORT"
depth=$(curl -sf "127.0.0.1:$PORT/v1/status" | sed -E 's/.*"depth":([0-9]+).*/\1/')
echo "profile=$PROFILE events=$depth fill=$(($(date +%s) - start))s disk=$(du -sh "$work/data" | cut -f1)"
echo "after fill: $(mem)"
awk '$1 > a { a = $1 } $2 > f { f = $2 } $1 + $2 > t { t = $1 + $2 }
	END { printf "fill peaks (sampled): RssAnon %d MiB  RssFile %d MiB  sum %d MiB\n", a / 1024, f / 1024, t / 1024 }' "$work/samples"
sleep "$IDLE"
echo "idle ${IDLE}s:  $(mem)"
