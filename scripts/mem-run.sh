#!/usr/bin/env bash
# One fleet run (scripts/fleet-run.sh) with hubd's memory watched: samples
# /proc/<hubd>/status every second (VmHWM, RssAnon, RssFile), takes a heap
# profile (pprof, inuse) at the moment of the highest sampled RSS and at the
# end, and prints the peaks after fleetsim's report. HUBD_FLAGS is passed
# on with --pprof-addr added; the run directory keeps the profiles
# (heap-peak.pb.gz, heap-end.pb.gz), the runtime's MemStats at the peak
# (memstats-peak.txt), the samples (mem.tsv) and hubd's log.
#
#   scripts/mem-run.sh configs/fleetsim-steady.yaml --devices 100 --rate 1000 --duration 2m
#   HUBD_FLAGS="--memory-limit 256MiB" scripts/mem-run.sh configs/fleetsim-catchup.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${FLEET_RUN_DIR:-$(mktemp -d /tmp/mem-run.XXXXXX)}
mkdir -p "$dir"
pprof=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export FLEET_RUN_DIR=$dir
export HUBD_FLAGS="${HUBD_FLAGS:-} --pprof-addr 127.0.0.1:$pprof"
(
	while [[ ! -s $dir/hubd.pid ]]; do sleep 0.2; done
	pid=$(cat "$dir/hubd.pid")
	best=0
	while kill -0 "$pid" 2>/dev/null; do
		line=$(awk '/^(VmHWM|VmRSS|RssAnon|RssFile):/ {printf "%d\t", $2}' "/proc/$pid/status" 2>/dev/null) || break
		[[ -n $line ]] || break
		echo "$(date +%s)	$line" >>"$dir/mem.tsv"
		rss=$(cut -f3 <<<"$line")
		if ((rss > best + 8192)); then
			best=$rss
			curl -sf -o "$dir/heap-peak.pb.gz" "http://127.0.0.1:$pprof/debug/pprof/heap" || true
			# the runtime's MemStats at the same moment (HeapInuse, HeapIdle, NextGC...)
			curl -sf "http://127.0.0.1:$pprof/debug/pprof/heap?debug=1" | sed -n '/^# runtime.MemStats/,$p' >"$dir/memstats-peak.txt" || true
		fi
		curl -sf -o "$dir/heap-end.pb.gz.tmp" "http://127.0.0.1:$pprof/debug/pprof/heap" && mv "$dir/heap-end.pb.gz.tmp" "$dir/heap-end.pb.gz" || true
		sleep 1
	done
) &
watch=$!
# hubd's peak when fleetsim reports the fleet drained, before its
# verification queries (which hold query results in hubd's heap).
set -o pipefail
rc=0
scripts/fleet-run.sh "$@" | while IFS= read -r line; do
	printf '%s\n' "$line"
	if [[ $line == "run "*": "*" after "*" devices" ]]; then
		awk '/^VmHWM:/ {print $2}' "/proc/$(cat "$dir/hubd.pid")/status" >"$dir/hwm-ingest" 2>/dev/null || true
	fi
done || rc=$?
wait "$watch" 2>/dev/null || true
[[ -s $dir/hwm-ingest ]] && echo "hubd VmHWM when the fleet had drained (before verification): $(($(cat "$dir/hwm-ingest") / 1024)) MiB"
# columns: time VmHWM VmRSS RssAnon RssFile (KiB)
awk -F'\t' '$2 > h { h = $2 } $4 > a { a = $4 } $5 > f { f = $5 } END {
	printf "hubd memory over the whole run (verification included): VmHWM %d MiB; sampled peaks RssAnon %d MiB, RssFile %d MiB\n", h / 1024, a / 1024, f / 1024 }' "$dir/mem.tsv"
echo "profiles and samples in $dir"
exit $rc
