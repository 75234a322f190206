#!/usr/bin/env bash
# One measured fleet run, as the fleet figures in docs/FLEETSIM.md were taken: builds
# hubd and fleetsim, starts hubd (embedded broker, fresh data directory,
# free loopback ports), runs fleetsim against it with the given scenario
# and flags plus --verify, and stops hubd. The report goes to stdout;
# hubd's log is kept in the run directory.
#
#   scripts/fleet-run.sh configs/fleetsim-steady.yaml --devices 10000 --duration 3m
#   scripts/fleet-run.sh configs/fleetsim-catchup.yaml
#
# FLEET_RUN_DIR sets the run directory (default: a new one under /tmp).
# FLEET_BROKER=mosquitto puts a Mosquitto of the run's own (free port,
# no persistence, no in-flight limit) between the fleet and hubd, which then
# uses it as its external broker (--mqtt-url) instead of its embedded one.
# FLEET_BROKER=nats runs hubd in cluster mode instead: the run starts its own
# NATS servers (NATS_NODES of them, 3 by default, or 1; nats-server 2.10+
# from $NATS_SERVER, else ~/go/bin/nats-server: go install
# github.com/nats-io/nats-server/v2@v2.15.3) on free loopback ports, each with
# JetStream, an MQTT listener and a store under the run directory, clustered
# when there are three; hubd gets every server in --nats-url (stream
# replicas: the node count), and fleetsim every MQTT listener, device i
# starting at the (i mod n)th. NATS_KILL_AT (seconds after fleetsim starts)
# kills server NATS_KILL_NODE (default 0) with SIGKILL, and NATS_DOWN_FOR
# (seconds, default 30) later starts it again on the same ports and store:
#   FLEET_BROKER=nats NATS_KILL_AT=40 scripts/fleet-run.sh configs/fleetsim-steady.yaml --devices 200 --duration 2m
# FLEET_HUBS=N (with FLEET_BROKER=nats; default 1) runs N hubd processes
# sharing the stream's partitions under leases (docs/CLUSTER.md, "Several
# hubs"): hub i has the id hub-i, its own HTTP port (advertised as
# http://127.0.0.1:PORT), data directory hub-i, log hubd-i.log and pid file
# hubd-i.pid; fleetsim gets every hub in --hub (hub 0 first) and asks the
# next when one does not answer (any hub answers for the whole fleet).
# HUBD_KILL_AT then kills hub HUBD_KILL_HUB (default 0), and
# HUBD_DOWN_FOR=never leaves it dead (verification then asks a dead hub
# first and goes on to the next):
#   FLEET_BROKER=nats FLEET_HUBS=3 HUBD_KILL_AT=50 HUBD_DOWN_FOR=10 scripts/fleet-run.sh configs/fleetsim-steady.yaml --devices 200 --duration 2m
# FLEET_MEASURE_FROM=S (seconds after fleetsim starts) reads each hub's
# CPU time (/proc/PID/stat utime+stime) and edgeflow_hub_events_applied_total
# and each NATS server's CPU time then and again when the fleet's run ended,
# and prints a "fleet-run: measured" line per process (stderr): CPU seconds,
# events applied and µs of CPU per event over that span (the NATS servers'
# over all hubs' events), and the span's length and event rate. A hub
# restarted within the span counts from its restart: measure without kills.
# scripts/hub-scaling.sh uses it.
# HUBD_FLAGS adds flags to hubd's command line (e.g. "--ack-qos 1");
# HUBD_ENV and FLEETSIM_ENV add environment variables to hubd's or
# fleetsim's alone (e.g. "GOGC=off GOMEMLIMIT=16GiB").
# HUBD_KILL_AT (seconds after fleetsim starts) kills hubd with SIGKILL then,
# and HUBD_DOWN_FOR (seconds, default 60) later starts it again on the same
# ports and data directory (its log in hubd-2.log, or hubd-i-2.log with
# FLEET_HUBS): a hub crash, e.g. in the
# middle of the mass-reconnect scenario's fleet outage (at 120 s for 180 s):
#   HUBD_KILL_AT=150 scripts/fleet-run.sh configs/fleetsim-mass-reconnect.yaml
# FLEET_RESTORE=1 (with FLEET_BROKER=nats) then stops hubd, deletes its data
# directory, starts it again, reports how long it took until /readyz said
# it had caught up with the stream (checking that it then holds every
# event applied before), and verifies again. "fleet-run: CPU seconds" lines
# (stderr) give the CPU time hubd and each NATS server used until the
# fleet's run ended, before verification.
# FLEETSIM_NICE (default 10) is fleetsim's nice value: the simulated fleet
# stands in for thousands of devices with CPUs of their own, so on a shared
# machine the hub it measures gets the CPU first. The latencies fleetsim
# reports still include its devices' own delays; FLEETSIM_NICE=0 runs both
# at the same priority.
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:?usage: scripts/fleet-run.sh SCENARIO.yaml [fleetsim flags...]}
shift
dir=${FLEET_RUN_DIR:-$(mktemp -d /tmp/fleet-run.XXXXXX)}
mkdir -p "$dir"
go build -o "$dir/hubd" ./cmd/hubd
go build -o "$dir/fleetsim" ./cmd/fleetsim
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mqtt=$(free_port)
nhubs=${FLEET_HUBS:-1}
if ! [[ $nhubs =~ ^[1-9][0-9]*$ ]]; then
	echo "FLEET_HUBS=$nhubs: want a count of hubs" >&2
	exit 2
fi
if ((nhubs > 1)) && [[ ${FLEET_BROKER:-embedded} != nats ]]; then
	echo "FLEET_HUBS=$nhubs needs FLEET_BROKER=nats (several hubs share a NATS stream)" >&2
	exit 2
fi
if ((nhubs > 1)) && [[ -n ${FLEET_RESTORE:-} ]]; then
	echo "FLEET_RESTORE restores one hub: not with FLEET_HUBS=$nhubs" >&2
	exit 2
fi
# Hub i's HTTP port, name (of its pid file and log) and data directory; one
# hub keeps the names hubd and hub.
http_ports=() hub_names=() hub_dirs=()
for ((i = 0; i < nhubs; i++)); do
	http_ports+=("$(free_port)")
	if ((nhubs == 1)); then
		hub_names+=(hubd) hub_dirs+=("$dir/hub")
	else
		hub_names+=("hubd-$i") hub_dirs+=("$dir/hub-$i")
	fi
done
http=${http_ports[0]}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
broker=()
hubmqtt=(--mqtt-listen "127.0.0.1:$mqtt")
fleetmqtt="tcp://127.0.0.1:$mqtt"
nats_pids=()
if [[ ${FLEET_BROKER:-embedded} == mosquitto ]]; then
	printf 'listener %s 127.0.0.1\nallow_anonymous true\nmax_inflight_messages 0\nmax_queued_messages 1000000\npersistence false\n' "$mqtt" >"$dir/mosquitto.conf"
	mosquitto -c "$dir/mosquitto.conf" >"$dir/mosquitto.log" 2>&1 &
	broker=($!)
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$mqtt") 2>/dev/null && break
		sleep 0.1
	done
	hubmqtt=(--mqtt-url "tcp://127.0.0.1:$mqtt")
elif [[ ${FLEET_BROKER:-embedded} == nats ]]; then
	natsbin=${NATS_SERVER:-$HOME/go/bin/nats-server}
	if ! "$natsbin" --version 2>/dev/null | grep -Eq 'v2\.(1[0-9]|[2-9][0-9])\.'; then
		echo "FLEET_BROKER=nats needs nats-server 2.10+ at $natsbin (or \$NATS_SERVER): go install github.com/nats-io/nats-server/v2@v2.15.3" >&2
		exit 2
	fi
	nodes=${NATS_NODES:-3}
	if [[ $nodes != 1 && $nodes != 3 ]]; then
		echo "NATS_NODES=$nodes: want 1 or 3" >&2
		exit 2
	fi
	nats_port=() nats_mqtt=() nats_route=()
	for ((i = 0; i < nodes; i++)); do
		nats_port+=("$(free_port)") nats_mqtt+=("$(free_port)") nats_route+=("$(free_port)")
	done
	routes=$(for ((i = 0; i < nodes; i++)); do printf 'nats-route://127.0.0.1:%s, ' "${nats_route[i]}"; done)
	urls=() mqtturls=()
	for ((i = 0; i < nodes; i++)); do
		mkdir -p "$dir/nats-n$i"
		{
			printf 'server_name: n%s\nlisten: 127.0.0.1:%s\n' "$i" "${nats_port[i]}"
			printf 'jetstream {\n  store_dir: "%s"\n  max_memory_store: 256MB\n  max_file_store: 16GB\n}\n' "$dir/nats-n$i/js"
			printf 'mqtt {\n  listen: 127.0.0.1:%s\n}\n' "${nats_mqtt[i]}"
			if ((nodes > 1)); then
				printf 'cluster {\n  name: fleet-run\n  listen: 127.0.0.1:%s\n  routes: [%s]\n}\n' "${nats_route[i]}" "${routes%, }"
			fi
		} >"$dir/nats-n$i/nats.conf"
		urls+=("nats://127.0.0.1:${nats_port[i]}") mqtturls+=("tcp://127.0.0.1:${nats_mqtt[i]}")
	done
	start_nats() { # $1: node index; the pid goes to $dir/nats-n$1/pid
		"$natsbin" -c "$dir/nats-n$1/nats.conf" >>"$dir/nats-n$1/nats.log" 2>&1 &
		echo $! >"$dir/nats-n$1/pid"
	}
	for ((i = 0; i < nodes; i++)); do
		start_nats "$i"
		nats_pids+=("$dir/nats-n$i/pid")
	done
	for ((i = 0; i < nodes; i++)); do
		for _ in $(seq 300); do
			(exec 3<>"/dev/tcp/127.0.0.1/${nats_mqtt[i]}") 2>/dev/null && break
			sleep 0.1
		done
	done
	hubmqtt=(--nats-url "$(IFS=,; echo "${urls[*]}")" --nats-replicas "$nodes")
	fleetmqtt=$(IFS=,; echo "${mqtturls[*]}")
elif [[ ${FLEET_BROKER:-embedded} != embedded ]]; then
	echo "FLEET_BROKER=$FLEET_BROKER: want embedded, mosquitto or nats" >&2
	exit 2
fi
start_hubd() { # $1: hub index, $2: log file; the pid goes to $dir/NAME.pid
	local cluster=()
	if ((nhubs > 1)); then
		cluster=(--hub-id "hub-$1" --http-advertise-url "http://127.0.0.1:${http_ports[$1]}")
	fi
	env ${HUBD_ENV:-} "$dir/hubd" "${hubmqtt[@]}" "${cluster[@]}" ${HUBD_FLAGS:-} --http-addr "127.0.0.1:${http_ports[$1]}" \
		--data-dir "${hub_dirs[$1]}" >"$2" 2>&1 &
	echo $! >"$dir/${hub_names[$1]}.pid"
}
for ((i = 0; i < nhubs; i++)); do
	start_hubd "$i" "$dir/${hub_names[i]}.log"
done
crash=()
stop_all() {
	kill "${crash[@]}" 2>/dev/null || true
	local pid i
	for ((i = 0; i < nhubs; i++)); do
		pid=$(cat "$dir/${hub_names[i]}.pid")
		kill "$pid" 2>/dev/null || true
	done
	for ((i = 0; i < nhubs; i++)); do
		pid=$(cat "$dir/${hub_names[i]}.pid")
		wait "$pid" 2>/dev/null || true                      # reaps it if it is this shell's child
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done # a restarted one
	done
	kill "${broker[@]}" 2>/dev/null || true
	for f in "${nats_pids[@]}"; do
		kill "$(cat "$f")" 2>/dev/null || true
	done
}
trap stop_all EXIT
# A cluster's hub is ready once the stream exists on a JetStream quorum
# and it has caught up with it.
for ((i = 0; i < nhubs; i++)); do
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:${http_ports[i]}/readyz" >/dev/null && break
		kill -0 "$(cat "$dir/${hub_names[i]}.pid")" 2>/dev/null || break
		sleep 0.1
	done
done
for ((i = 0; i < nhubs; i++)); do
	if ! kill -0 "$(cat "$dir/${hub_names[i]}.pid")" 2>/dev/null; then
		echo "fleet-run: ${hub_names[i]} exited before the fleet started; its log ($dir/${hub_names[i]}.log) ends:" >&2
		tail -3 "$dir/${hub_names[i]}.log" >&2
		exit 1
	fi
done
hub_urls=$(for ((i = 0; i < nhubs; i++)); do printf '127.0.0.1:%s,' "${http_ports[i]}"; done)
hub_urls=${hub_urls%,}
echo "run directory $dir; ${FLEET_BROKER:-embedded} broker on mqtt $fleetmqtt, hubd http $hub_urls" >&2
if [[ -n ${HUBD_KILL_AT:-} ]]; then
	k=${HUBD_KILL_HUB:-0}
	if ! [[ $k =~ ^[0-9]+$ ]] || ((k >= nhubs)); then
		echo "HUBD_KILL_HUB=$k: want a hub index below $nhubs" >&2
		exit 2
	fi
	(
		sleep "$HUBD_KILL_AT"
		kill -9 "$(cat "$dir/${hub_names[k]}.pid")"
		echo "fleet-run: ${hub_names[k]} killed (SIGKILL) at ${HUBD_KILL_AT}s" >&2
		if [[ ${HUBD_DOWN_FOR:-60} != never ]]; then
			sleep "${HUBD_DOWN_FOR:-60}"
			start_hubd "$k" "$dir/${hub_names[k]}-2.log"
			echo "fleet-run: ${hub_names[k]} started again after ${HUBD_DOWN_FOR:-60}s" >&2
		fi
	) &
	crash+=($!)
fi
if [[ -n ${NATS_KILL_AT:-} ]]; then
	(
		k=${NATS_KILL_NODE:-0}
		sleep "$NATS_KILL_AT"
		kill -9 "$(cat "$dir/nats-n$k/pid")"
		echo "fleet-run: NATS server n$k killed (SIGKILL) at ${NATS_KILL_AT}s" >&2
		sleep "${NATS_DOWN_FOR:-30}"
		start_nats "$k"
		echo "fleet-run: NATS server n$k started again after ${NATS_DOWN_FOR:-30}s" >&2
	) &
	crash+=($!)
fi
# cpu_seconds PIDFILE: the process's user + system CPU time so far ("dead"
# when it is not running).
cpu_seconds() {
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 0
	[[ -r /proc/$pid/stat ]] || { printf 'dead'; return 0; }
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$pid/stat"
}
# report_cpu: the CPU time the hub and its broker used so far (the
# embedded broker is inside hubd; a restarted process counts from its start).
report_cpu() {
	local line="fleet-run: CPU seconds so far:" sep="" i
	for ((i = 0; i < nhubs; i++)); do
		line+="$sep ${hub_names[i]} $(cpu_seconds "$dir/${hub_names[i]}.pid")"
		sep=,
	done
	for ((i = 0; i < ${#nats_pids[@]}; i++)); do
		line+=", nats-n$i $(cpu_seconds "${nats_pids[i]}")"
	done
	echo "$line" >&2
}
# applied_total [INDEX]: hub INDEX's (default 0) edgeflow_hub_events_applied_total.
applied_total() {
	curl -sf "http://127.0.0.1:${http_ports[${1:-0}]}/metrics" | awk '$1 == "edgeflow_hub_events_applied_total" { printf "%d", $2 }'
}
# measure_sample FILE: one line per process, "NAME CPU-SECONDS [EVENTS-APPLIED]".
measure_sample() {
	local i
	{
		echo "time $(date +%s.%N)"
		for ((i = 0; i < nhubs; i++)); do
			echo "${hub_names[i]} $(cpu_seconds "$dir/${hub_names[i]}.pid") $(applied_total "$i")"
		done
		for ((i = 0; i < ${#nats_pids[@]}; i++)); do
			echo "nats-n$i $(cpu_seconds "${nats_pids[i]}")"
		done
	} >"$1"
}
# measure_report: the "fleet-run: measured" lines from the two samples.
measure_report() {
	if [[ ! -s $dir/measure-0.txt ]]; then
		echo "fleet-run: measured: nothing (the run ended before FLEET_MEASURE_FROM=${FLEET_MEASURE_FROM}s)" >&2
		return
	fi
	measure_sample "$dir/measure-1.txt"
	awk -v from="$FLEET_MEASURE_FROM" 'NR == FNR { cpu[$1] = $2; ev[$1] = $3; next }
		$1 == "time" { span = $2 - cpu["time"]; next }
		{ dc = $2 - cpu[$1] }
		$1 ~ /^hubd/ { de = $3 - ev[$1]; all += de
			printf "fleet-run: measured from %ss to the end of the run: %s CPU %.2f s, %d events applied, %s µs/event\n", from, $1, dc, de, (de > 0 ? sprintf("%.2f", dc * 1e6 / de) : "-"); next }
		{ nats[$1] = dc; order[++n] = $1 }
		END { for (i = 1; i <= n; i++) { s += nats[order[i]]
			printf "fleet-run: measured from %ss to the end of the run: %s CPU %.2f s, %s µs per event applied by all hubs (%d)\n", from, order[i], nats[order[i]], (all > 0 ? sprintf("%.2f", nats[order[i]] * 1e6 / all) : "-"), all }
			if (n) printf "fleet-run: measured from %ss to the end of the run: NATS servers CPU %.2f s, %s µs/event\n", from, s, (all > 0 ? sprintf("%.2f", s * 1e6 / all) : "-")
			printf "fleet-run: measured from %ss to the end of the run: %.1f s, %d events applied by all hubs, %.0f events/s\n", from, span, all, (span > 0 ? all / span : 0) }' \
		"$dir/measure-0.txt" "$dir/measure-1.txt" >&2
}
if [[ -n ${FLEET_MEASURE_FROM:-} ]]; then
	rm -f "$dir/measure-0.txt"
	(
		sleep "$FLEET_MEASURE_FROM"
		measure_sample "$dir/measure-0.tmp" && mv "$dir/measure-0.tmp" "$dir/measure-0.txt"
	) &
	crash+=($!)
fi
# The run without verification, then the CPU line (before the queries of
# the verification add to it), then the verification of the saved truth.
set +e
env ${FLEETSIM_ENV:-} nice -n "${FLEETSIM_NICE:-10}" "$dir/fleetsim" --scenario "$scenario" --mqtt-url "$fleetmqtt" --hub "$hub_urls" \
	--data-dir "$dir/sim" --truth-out "$dir/truth.gob" "$@" --verify=false
rc=$?
report_cpu
if [[ -n ${FLEET_MEASURE_FROM:-} ]]; then
	measure_report
fi
verify() {
	"$dir/fleetsim" verify --scenario "$scenario" --truth "$dir/truth.gob" --hub "$hub_urls" "$@"
}
if ((rc == 0)); then
	verify "$@"
	rc=$?
fi
# FLEET_RESTORE=1 (cluster mode): stop hubd, delete its data directory,
# start it again, time until /readyz answers 200 (it does once every
# partition has applied what the stream held at the start), check that it
# has then applied as many events as before, and verify again.
if ((rc == 0)) && [[ -n ${FLEET_RESTORE:-} ]]; then
	if [[ ${FLEET_BROKER:-embedded} != nats ]]; then
		echo "FLEET_RESTORE needs FLEET_BROKER=nats" >&2
		exit 2
	fi
	n=$(applied_total)
	pid=$(cat "$dir/hubd.pid")
	kill "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	rm -rf "$dir/hub"
	t0=$(date +%s.%N)
	start_hubd 0 "$dir/hubd-restore.log"
	until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null; do
		now=$(date +%s.%N)
		if (($(echo "$now - $t0 > ${FLEET_RESTORE_TIMEOUT:-600}" | bc))); then
			echo "fleet-run: restore: /readyz not 200 after ${FLEET_RESTORE_TIMEOUT:-600}s ($(applied_total) of $n events applied)" >&2
			exit 1
		fi
		sleep 0.05
	done
	took=$(echo "$(date +%s.%N) - $t0" | bc)
	got=$(applied_total)
	if [[ -z $got || $got -lt $n ]]; then
		echo "fleet-run: restore: /readyz 200 after ${took}s with only ${got:-0} of $n events applied" >&2
		exit 1
	fi
	echo "fleet-run: restore: hubd on an empty data directory was ready (caught up with the stream, $got events applied) in ${took}s ($(echo "scale=2; $took * 1000000 / $n" | bc)s per million events)" >&2
	report_cpu
	verify "$@"
	rc=$?
fi
exit $rc
