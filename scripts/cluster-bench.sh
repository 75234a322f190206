#!/usr/bin/env bash
# The same fleet load through single-node hubd (embedded broker) and through
# hubd in cluster mode on three NATS servers (stream R3), one after the
# other, with scripts/fleet-run.sh; then a table.
#
#   scripts/cluster-bench.sh
#   BENCH_DEVICES=2000 BENCH_RATE=50 scripts/cluster-bench.sh
#
# Two loads, each run both ways and verified (0 lost, 0 duplicated, windows
# equal the truth, or the row says FAILED):
#  - steady: configs/fleetsim-steady.yaml with BENCH_DEVICES devices (default
#    1000) at BENCH_RATE events/s each (default 20) for BENCH_DURATION
#    (default 90s; ramp-up 30s and warm-up 15s included). Events/s is the
#    mean acked rate of fleetsim's progress lines after ramp-up and warm-up
#    (BENCH_STEADY_FROM, default 45 s); ack latency p50/p99 is fleetsim's
#    steady-state figure. A CPU profile of hubd is taken over 20 s of it
#    (go tool pprof -top in the run directory, hubd-top.txt).
#  - catch-up: configs/fleetsim-catchup.yaml with BENCH_CATCHUP_DEVICES
#    devices (default 300: one hour at 1 event/s each, about 1,080,000
#    buffered events) that all reconnect at once: the drain rate is the
#    fastest end-to-end rate the fleet reaches. In cluster mode hubd is then
#    restored from the stream on an empty data directory
#    (FLEET_RESTORE=1), timed, and verified again.
# CPU per event is the process's CPU time until the fleet's run ended
# (ramp-up and drain included, verification not) over the events acked.
# NATS_NODES=1 compares against a one-server, R1 stream instead. Results
# and every run directory go under BENCH_DIR (default a new /tmp dir); with
# BENCH_KEEP=1 a run whose report.txt is already there is not run again
# (the table is made from the directories). BENCH_LOADS (default "steady
# catchup") and BENCH_MODES (default "embedded nats") choose the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_DIR:-$(mktemp -d /tmp/cluster-bench.XXXXXX)}
mkdir -p "$out"
devices=${BENCH_DEVICES:-1000}
rate=${BENCH_RATE:-20}
duration=${BENCH_DURATION:-90s}
from=${BENCH_STEADY_FROM:-45}
catchup=${BENCH_CATCHUP_DEVICES:-300}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# field FILE REGEX: the first match's first group.
field() { sed -nE "s|$2|\1|p" "$1" | head -1; }

# per_event SECONDS EVENTS: microseconds per event ("-" without figures).
per_event() {
	if [[ -n $1 && -n $2 && $2 -gt 0 ]]; then
		echo "scale=1; $1 * 1000000 / $2" | bc
	else
		echo "-"
	fi
}

# nats_cpu FILE: the NATS servers' CPU seconds summed from the first CPU line.
nats_cpu() { { grep -m1 'CPU seconds' "$1" || true; } | { grep -oE 'nats-n[0-9]+ [0-9.]+' || true; } | awk '{ s += $2 } END { if (NR) printf "%.2f", s }'; }

# run LOAD MODE: one fleet-run into $out/LOAD-MODE, its exit status in
# status.txt and the load average before it in loadavg.txt.
run() {
	local load=$1 mode=$2 run=$out/$1-$2
	if [[ -n ${BENCH_KEEP:-} && -s $run/report.txt ]]; then
		return
	fi
	if [[ $load != steady && $load != catchup ]] || [[ $mode != embedded && $mode != nats ]]; then
		echo "cluster-bench: load $load, mode $mode: want steady or catchup, embedded or nats" >&2
		exit 2
	fi
	rm -rf "$run"
	mkdir -p "$run"
	cut -d' ' -f1-3 /proc/loadavg >"$run/loadavg.txt"
	if [[ $load == steady ]]; then
		local pprof prof
		pprof=$(free_port)
		(
			# From the steady state on (the builds and the hub's start
			# take a few seconds more).
			sleep $((from + 15))
			curl -sf -o "$run/hubd.pprof" "http://127.0.0.1:$pprof/debug/pprof/profile?seconds=20" &&
				go tool pprof -top -nodecount 40 "$run/hubd.pprof" >"$run/hubd-top.txt" 2>/dev/null
		) &
		prof=$!
		echo "cluster-bench: steady, $mode: $devices devices x $rate events/s for $duration ($run)" >&2
		FLEET_RUN_DIR=$run FLEET_BROKER=$mode HUBD_ENV="HUBD_PPROF_ADDR=127.0.0.1:$pprof ${HUBD_ENV:-}" \
			scripts/fleet-run.sh configs/fleetsim-steady.yaml --devices "$devices" --rate "$rate" --duration "$duration" \
			>"$run/report.txt" 2>"$run/progress.txt" && echo OK >"$run/status.txt" || echo FAILED >"$run/status.txt"
		wait "$prof" || true
	else
		local restore=()
		[[ $mode == nats ]] && restore=(FLEET_RESTORE=1)
		echo "cluster-bench: catch-up, $mode: $catchup devices back after an hour ($run)" >&2
		env FLEET_RUN_DIR="$run" FLEET_BROKER="$mode" "${restore[@]}" \
			scripts/fleet-run.sh configs/fleetsim-catchup.yaml --devices "$catchup" \
			>"$run/report.txt" 2>"$run/progress.txt" && echo OK >"$run/status.txt" || echo FAILED >"$run/status.txt"
	fi
}

# row LOAD MODE: the table row of one run directory.
row() {
	local run=$out/$1-$2 eps p50 p99 lat acked hcpu ncpu
	[[ -s $run/report.txt ]] || return 0
	acked=$(field "$run/report.txt" '.*events: appended [0-9]+, published [0-9]+, acked ([0-9]+),.*')
	if [[ $1 == steady ]]; then
		eps=$(awk -v from="$from" '$2 == "run" && $1 + 0 >= from { for (i = 1; i <= NF; i++) if ($i == "acked") { s += $(i + 1); n++ } }
			END { if (n) printf "%.0f", s / n; else print "-" }' "$run/progress.txt")
		lat='.*steady state .*ack latency'
	else
		eps=$(field "$run/report.txt" '.*catch-up: .* = ([0-9]+) events/s.*')
		lat='.*peak ack rate .*ack latency'
	fi
	p50=$(field "$run/report.txt" "$lat"' p50 ([0-9.]+)ms .*')
	p99=$(field "$run/report.txt" "$lat"' p50 [0-9.]+ms p99 ([0-9.]+)ms .*')
	hcpu=$(field "$run/progress.txt" '.*CPU seconds so far: hubd ([0-9.]+).*')
	ncpu=$(nats_cpu "$run/progress.txt")
	printf '| %s | %s | %s | %s ms | %s ms | %s µs | %s µs | %s | %s | %s |\n' "$1" "$2" "${eps:--}" "${p50:--}" "${p99:--}" \
		"$(per_event "$hcpu" "$acked")" "$(per_event "$ncpu" "$acked")" "${acked:--}" "$(cat "$run/status.txt" 2>/dev/null)" "$(cat "$run/loadavg.txt" 2>/dev/null)"
}

loads=${BENCH_LOADS:-steady catchup}
modes=${BENCH_MODES:-embedded nats}
for load in $loads; do
	for mode in $modes; do
		run "$load" "$mode"
	done
done
{
	echo
	echo "cluster-bench $(date -u +%FT%TZ), $(nproc) cores, NATS_NODES=${NATS_NODES:-3}; runs in $out"
	echo
	echo "| load | hub | events/s | ack p50 | ack p99 | hubd CPU/event | NATS CPU/event | events | verify | load average before |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for load in steady catchup; do
		for mode in embedded nats; do
			row "$load" "$mode"
		done
	done
	if [[ -s $out/catchup-nats/progress.txt ]]; then
		echo
		grep -m1 'fleet-run: restore:' "$out/catchup-nats/progress.txt" | sed 's/^fleet-run: //' || echo "restore: no result"
	fi
	for mode in embedded nats; do
		if [[ -s $out/steady-$mode/hubd-top.txt ]]; then
			echo
			echo "hubd CPU profile over 20 s of the steady run, $mode (go tool pprof -top; all of it in $out/steady-$mode/hubd-top.txt):"
			sed -n '5,25p' "$out/steady-$mode/hubd-top.txt"
		fi
	done
} | tee "$out/summary.txt"
