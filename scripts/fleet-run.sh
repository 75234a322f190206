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
# HUBD_FLAGS adds flags to hubd's command line (e.g. "--ack-qos 1");
# HUBD_ENV and FLEETSIM_ENV add environment variables to hubd's or
# fleetsim's alone (e.g. "GOGC=off GOMEMLIMIT=16GiB").
# HUBD_KILL_AT (seconds after fleetsim starts) kills hubd with SIGKILL then,
# and HUBD_DOWN_FOR (seconds, default 60) later starts it again on the same
# ports and data directory (its log in hubd-2.log): a hub crash, e.g. in the
# middle of the mass-reconnect scenario's fleet outage (at 120 s for 180 s):
#   HUBD_KILL_AT=150 scripts/fleet-run.sh configs/fleetsim-mass-reconnect.yaml
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
http=$(free_port)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
broker=()
hubmqtt=(--mqtt-listen "127.0.0.1:$mqtt")
if [[ ${FLEET_BROKER:-embedded} == mosquitto ]]; then
	printf 'listener %s 127.0.0.1\nallow_anonymous true\nmax_inflight_messages 0\nmax_queued_messages 1000000\npersistence false\n' "$mqtt" >"$dir/mosquitto.conf"
	mosquitto -c "$dir/mosquitto.conf" >"$dir/mosquitto.log" 2>&1 &
	broker=($!)
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$mqtt") 2>/dev/null && break
		sleep 0.1
	done
	hubmqtt=(--mqtt-url "tcp://127.0.0.1:$mqtt")
elif [[ ${FLEET_BROKER:-embedded} != embedded ]]; then
	echo "FLEET_BROKER=$FLEET_BROKER: want embedded or mosquitto" >&2
	exit 2
fi
start_hubd() { # $1: log file; the pid goes to $dir/hubd.pid
	env ${HUBD_ENV:-} "$dir/hubd" "${hubmqtt[@]}" ${HUBD_FLAGS:-} --http-addr "127.0.0.1:$http" --data-dir "$dir/hub" >"$1" 2>&1 &
	echo $! >"$dir/hubd.pid"
}
start_hubd "$dir/hubd.log"
crash=()
stop_all() {
	kill "${crash[@]}" 2>/dev/null || true
	local pid
	pid=$(cat "$dir/hubd.pid")
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true # reaps it if it is this shell's child
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done # a restarted one
	kill "${broker[@]}" 2>/dev/null || true
}
trap stop_all EXIT
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break
	sleep 0.1
done
echo "run directory $dir; ${FLEET_BROKER:-embedded} broker on mqtt 127.0.0.1:$mqtt, hubd http 127.0.0.1:$http" >&2
if [[ -n ${HUBD_KILL_AT:-} ]]; then
	(
		sleep "$HUBD_KILL_AT"
		kill -9 "$(cat "$dir/hubd.pid")"
		echo "fleet-run: hubd killed (SIGKILL) at ${HUBD_KILL_AT}s" >&2
		sleep "${HUBD_DOWN_FOR:-60}"
		start_hubd "$dir/hubd-2.log"
		echo "fleet-run: hubd started again after ${HUBD_DOWN_FOR:-60}s" >&2
	) &
	crash=($!)
fi
env ${FLEETSIM_ENV:-} nice -n "${FLEETSIM_NICE:-10}" "$dir/fleetsim" --scenario "$scenario" --mqtt-url "tcp://127.0.0.1:$mqtt" --hub "127.0.0.1:$http" \
	--data-dir "$dir/sim" --verify "$@"
