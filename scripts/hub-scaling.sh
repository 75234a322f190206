#!/usr/bin/env bash
# hubd's CPU per event with 1, 2 and 3 hubs sharing one NATS stream: the
# same fleet load (configs/fleetsim-steady.yaml, SCALE_DEVICES devices,
# default 300, at SCALE_RATE events/s each, default 20, for SCALE_DURATION,
# default 75s; acks subscribed at QoS SCALE_ACK_QOS, default 0, so that
# NATS' MQTT side creates no JetStream consumer per device) through scripts/fleet-run.sh with FLEET_BROKER=nats (three
# NATS servers, stream R3) and FLEET_HUBS=N for each N in SCALE_HUBS
# (default "1 2 3"), one run after the other, each verified; then a table.
#
#   scripts/hub-scaling.sh
#   SCALE_HUBS="1 3" SCALE_DEVICES=500 scripts/hub-scaling.sh
#
# CPU is measured from SCALE_FROM seconds after fleetsim starts (default
# 45: after the scenario's 30 s ramp-up and 15 s warm-up) to the end of the
# fleet's run (FLEET_MEASURE_FROM): each process's utime+stime from
# /proc/PID/stat, each hub's over the events it applied in that span
# (edgeflow_hub_events_applied_total), the NATS servers' over the events all
# hubs applied. About 2 minutes a run with the defaults. Everything shares
# this machine's cores: the figures are CPU per event, not a throughput
# ceiling. Results and the run directories go under SCALE_DIR (default a
# new /tmp directory).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${SCALE_DIR:-$(mktemp -d /tmp/hub-scaling.XXXXXX)}
mkdir -p "$out"
devices=${SCALE_DEVICES:-300}
ackqos=${SCALE_ACK_QOS:-0}
rate=${SCALE_RATE:-20}
duration=${SCALE_DURATION:-75s}
from=${SCALE_FROM:-45}
hubs=${SCALE_HUBS:-1 2 3}

for n in $hubs; do
	run=$out/hubs-$n
	rm -rf "$run"
	mkdir -p "$run"
	cut -d' ' -f1-3 /proc/loadavg >"$run/loadavg.txt"
	echo "hub-scaling: $n hub(s), $devices devices x $rate events/s for $duration, ack QoS $ackqos ($run)" >&2
	FLEET_RUN_DIR=$run FLEET_BROKER=nats FLEET_HUBS=$n FLEET_MEASURE_FROM=$from \
		scripts/fleet-run.sh configs/fleetsim-steady.yaml --devices "$devices" --rate "$rate" --duration "$duration" --mqtt-ack-qos "$ackqos" \
		>"$run/report.txt" 2>"$run/progress.txt" && echo OK >"$run/status.txt" || echo FAILED >"$run/status.txt"
done

# row N: the table row of one run.
row() {
	local run=$out/hubs-$1
	[[ -s $run/progress.txt ]] || return 0
	awk -v n="$1" -v status="$(cat "$run/status.txt")" -v loadavg="$(cat "$run/loadavg.txt")" '
		/fleet-run: measured/ && $11 ~ /^hubd/ { hc += $13; he += $15; per = per sep $11 " " $18; sep = ", " }
		/fleet-run: measured/ && $11 == "NATS" { nc = $14 }
		/fleet-run: measured/ && $14 == "events" && $15 == "applied" { eps = $19; span = $11 }
		END {
			printf "| %d | %s | %s | %s | %s | %s | %s | %s |\n", n, (eps == "" ? "-" : eps), (span == "" ? "-" : span " s"),
				(he > 0 ? sprintf("%.2f µs", hc * 1e6 / he) : "-"), (per == "" ? "-" : per),
				(he > 0 ? sprintf("%.2f µs", nc * 1e6 / he) : "-"), status, loadavg
		}' "$run/progress.txt"
}

{
	echo
	echo "hub-scaling $(date -u +%FT%TZ), $(nproc) cores, $devices devices x $rate events/s for $duration (ack QoS $ackqos), measured from ${from}s; runs in $out"
	echo
	echo "| hubs | events/s applied | span | hubd CPU/event (all hubs) | per hub (µs/event) | NATS CPU/event (3 servers) | verify | load average before |"
	echo "|---|---|---|---|---|---|---|---|"
	for n in $hubs; do
		row "$n"
	done
	echo
	grep -h 'fleet-run: measured' "$out"/hubs-*/progress.txt | sed 's/^fleet-run: //'
} | tee "$out/summary.txt"
