#!/usr/bin/env bash
# scripts/bench.sh: the reference benchmark of likes, on loopback only.
#
# 1. Installs redis-server (apt-get) if, and only if, redis-server or
#    redis-benchmark is missing.
# 2. Starts a throwaway Redis on a free loopback port and measures unpipelined
#    INCR (redis-benchmark -t incr -n 200000 -c 50 -q): the reference, taken in
#    the same run on the same machine.
# 3. Builds likesd and likectl; for each configuration in BENCH_REGIONS starts
#    `likesd dev` on a temporary data folder and free loopback ports with
#    --user-rate -1, and runs `likectl bench` against its first region.
# 4. Stops both and prints the figures as ratios against the reference.
#
# Environment (all optional):
#   DURATION=10s   length of each likectl bench phase (3 phases)
#   WORKERS=64     likectl bench workers
#   ITEMS=10000    items of the uniform and read phases
#   BENCH_JSON=F   also keep the likectl JSON reports at F-1.json, F-2.json, …
#   BENCH_REGIONS="us us,eu,ap"
#                  space-separated likesd dev --regions configurations to bench in
#                  turn: one region alone (the in-region write path), then the
#                  default three regions in one process (forwarding to the owner
#                  region, replication, cross-region asOf)
#   REDIS_N=200000 INCR requests of the reference
#
# Bounded: every wait loop has a fixed number of tries; the whole run takes about
# (3*DURATION + 10 s) per configuration plus ~20 s. Idempotent: everything lives in a temporary
# folder removed on exit, and both servers are stopped by the EXIT trap.
set -euo pipefail

DURATION=${DURATION:-10s}
WORKERS=${WORKERS:-64}
ITEMS=${ITEMS:-10000}
REDIS_N=${REDIS_N:-200000}
BENCH_REGIONS=${BENCH_REGIONS:-us us,eu,ap}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/likes-bench.XXXXXX")
REDIS_PORT=""
LIKESD_PID=""

log() { printf 'bench.sh: %s\n' "$*" >&2; }

cleanup() {
	local rc=$?
	if [[ -n "$LIKESD_PID" ]] && kill -0 "$LIKESD_PID" 2>/dev/null; then
		kill -TERM "$LIKESD_PID" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$LIKESD_PID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$LIKESD_PID" 2>/dev/null || true
	fi
	stop_redis
	rm -rf "$TMP"
	exit "$rc"
}

stop_redis() {
	if [[ -f "$TMP/redis.pid" ]]; then
		local pid
		pid=$(cat "$TMP/redis.pid" 2>/dev/null || true)
		if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
			redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
		rm -f "$TMP/redis.pid"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_range N prints a base port such that base..base+N-1 are all unused on
# TCP and UDP (bounded tries).
free_range() {
	local n=$1 base used ok
	used=$(ss -Htanu 2>/dev/null | awk '{print $5}' | sed -E 's/.*[:.]([0-9]+)$/\1/' | sort -un)
	for _ in $(seq 1 100); do
		base=$((20000 + RANDOM % 40000))
		ok=1
		for ((p = base; p < base + n; p++)); do
			if grep -qx "$p" <<<"$used"; then ok=0; break; fi
		done
		if [[ $ok -eq 1 ]]; then
			echo "$base"
			return 0
		fi
	done
	log "no free port range found"
	return 1
}

log "machine: $(nproc) cores; load average at start: $(cut -d" " -f1-3 /proc/loadavg)"

# --- 1. Redis, installed only if missing -----------------------------------
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
	log "redis-server/redis-benchmark missing: installing with apt-get"
	SUDO=""
	[[ $(id -u) -eq 0 ]] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
fi
# Debian's package may start a system redis on 6379; we never touch it and use
# our own throwaway instance on a free port.

# --- 2. Redis reference ------------------------------------------------------
REDIS_PORT=$(free_range 1)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
	--dir "$TMP" --pidfile "$TMP/redis.pid" --logfile "$TMP/redis.log"
for i in $(seq 1 50); do
	[[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && break
	[[ $i -eq 50 ]] && { log "redis did not start"; cat "$TMP/redis.log" >&2; exit 1; }
	sleep 0.1
done
# proc_cpu_ms PID: user+system CPU of a process in ms (Linux USER_HZ = 100).
proc_cpu_ms() { sed -E 's/.*\) //' "/proc/$1/stat" | awk '{print ($12 + $13) * 10}'; }
REDIS_PID=$(cat "$TMP/redis.pid")
log "redis-benchmark -p $REDIS_PORT -t incr -n $REDIS_N -c 50 -q (unpipelined)"
R0=$(proc_cpu_ms "$REDIS_PID")
TIMEFORMAT='%3U %3S'
{ time timeout 120 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -t incr -n "$REDIS_N" -c 50 -q >"$TMP/redis-bench.out" 2>&1; } 2>"$TMP/redis-bench.time"
R1=$(proc_cpu_ms "$REDIS_PID")
REDIS_OUT=$(tr '\r' '\n' <"$TMP/redis-bench.out" | grep -E '^INCR: [0-9.]+ requests per second' | tail -1 || true)
echo "$REDIS_OUT"
REDIS_RPS=$(sed -E 's/^INCR: ([0-9.]+) requests per second.*/\1/' <<<"$REDIS_OUT")
REDIS_P50=$(sed -nE 's/.*p50=([0-9.]+) msec.*/\1/p' <<<"$REDIS_OUT")
[[ -n "$REDIS_RPS" ]] || { log "could not parse redis-benchmark output"; cat "$TMP/redis-bench.out" >&2; exit 1; }
# CPU per INCR: server (redis-server) and client (redis-benchmark), in µs.
REDIS_SRV_US=$(awk -v d=$((R1 - R0)) -v n="$REDIS_N" 'BEGIN{printf "%.1f", d * 1000 / n}')
REDIS_CLI_US=$(awk -v n="$REDIS_N" '{printf "%.1f", ($1 + $2) * 1e6 / n}' "$TMP/redis-bench.time")
echo "redis CPU per INCR: server ${REDIS_SRV_US} µs, redis-benchmark ${REDIS_CLI_US} µs"
stop_redis # idle from here on; stopped now so it takes nothing from likesd

# --- 3. likes ----------------------------------------------------------------
log "building likesd and likectl"
(cd "$ROOT" && go build -o "$TMP/likesd" ./cmd/likesd && go build -o "$TMP/likectl" ./cmd/likectl)
LIKES_AUTH_SECRET="bench-$(date +%s%N)-$RANDOM"
export LIKES_AUTH_SECRET

# run_config REGIONS: start `likesd dev --regions REGIONS` on fresh ports and a
# fresh data folder, bench its first region, stop it. The report is
# $TMP/report-<n>.json.
run_config() {
	local regions=$1 n=$2 nreg http grpc gossip etcd url
	nreg=$(tr ',' '\n' <<<"$regions" | wc -l)
	http=$(free_range "$nreg")
	grpc=$(free_range "$nreg")
	gossip=$(free_range "$nreg")
	etcd=$(free_range 2)
	"$TMP/likesd" dev --regions "$regions" --host 127.0.0.1 --http-port "$http" --grpc-port "$grpc" \
		--gossip-port "$gossip" --etcd-port "$etcd" --data "$TMP/data-$n" --user-rate -1 \
		>"$TMP/likesd-$n.out" 2>"$TMP/likesd-$n.err" &
	LIKESD_PID=$!
	url="http://127.0.0.1:$http"
	for i in $(seq 1 150); do
		curl -fsS --max-time 1 "http://127.0.0.1:$((http + nreg - 1))/healthz" >/dev/null 2>&1 && break
		if [[ $i -eq 150 ]] || ! kill -0 "$LIKESD_PID" 2>/dev/null; then
			log "likesd did not start"; tail -20 "$TMP/likesd-$n.err" >&2; exit 1
		fi
		sleep 0.2
	done
	log "[$regions] likectl bench --url $url --duration $DURATION --workers $WORKERS --items $ITEMS"
	"$TMP/likectl" bench --url "$url" --duration "$DURATION" --workers "$WORKERS" --items "$ITEMS" --json "$TMP/report-$n.json" \
		--server-pid "$LIKESD_PID"
	kill -TERM "$LIKESD_PID"
	for _ in $(seq 1 150); do kill -0 "$LIKESD_PID" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$LIKESD_PID" 2>/dev/null || true
	LIKESD_PID=""
}

n=0
for regions in $BENCH_REGIONS; do
	n=$((n + 1))
	run_config "$regions" "$n"
done

# --- 4. ratios ---------------------------------------------------------------
echo
echo "== likes vs Redis (same run, same machine: $(nproc) cores, loopback) =="
echo "redis INCR (unpipelined, -c 50): $(printf '%.0f' "$REDIS_RPS") req/s, p50 ${REDIS_P50:-?} ms;" \
	"CPU per INCR: server $REDIS_SRV_US µs + client $REDIS_CLI_US µs"
n=0
for regions in $BENCH_REGIONS; do
	n=$((n + 1))
	[[ -n "${BENCH_JSON:-}" ]] && cp "$TMP/report-$n.json" "${BENCH_JSON%.json}-$n.json"
	jq -r --argjson redis "$REDIS_RPS" --arg regions "$regions" --argjson rsrv "$REDIS_SRV_US" \
		--argjson rcli "$REDIS_CLI_US" --argjson cores "$(nproc)" '
		def ph(n): (.phases[] | select(.name == n));
		def r2: (. * 100 | round) / 100;
		ph("uniform-writes") as $u | ph("viral-writes") as $v | ph("count-reads") as $c |
		"",
		"-- likesd dev --regions \($regions) (bench on the first region) --",
		"like writes, uniform   \($u.throughputPerS | round) req/s   p50 \($u.latency.p50Ms) ms  p99 \($u.latency.p99Ms) ms  errors \($u.errors)",
		"like writes, viral     \($v.throughputPerS | round) req/s   p50 \($v.latency.p50Ms) ms  p99 \($v.latency.p99Ms) ms  errors \($v.errors)",
		"count reads            \($c.throughputPerS | round) req/s   p50 \($c.latency.p50Ms) ms  p99 \($c.latency.p99Ms) ms  errors \($c.errors)",
		"ratio  like-writes/s / redis INCR/s  = \($u.throughputPerS / $redis | r2)   (target >= 0.5)",
		"ratio  viral / uniform throughput    = \($v.throughputPerS / $u.throughputPerS | r2)   (target >= 0.9)",
		"ratio  count-reads/s / redis INCR/s  = \($c.throughputPerS / $redis | r2)",
		"write p99 uniform / viral            = \($u.latency.p99Ms) / \($v.latency.p99Ms) ms   (target < 150)",
		"staleness p99 uniform / viral        = \($u.staleness.p99Ms) / \($v.staleness.p99Ms) ms   (target < 1000)",
		"staleness p99, first reads (uniform) = \($u.staleness.firstReadP99Ms) ms over \($u.staleness.firstReads) items",
		"CPU per like-write (uniform)         = server \($u.serverCpuPerReqUs | round) µs + load generator \($u.clientCpuPerReqUs | round) µs",
		"ratio  redis server CPU/INCR / likesd CPU/write = \($rsrv / $u.serverCpuPerReqUs | r2)   (contention-robust analogue of the throughput ratio)",
		"idle-machine estimate, \($cores) cores, client included: writes \($cores * 1e6 / ($u.serverCpuPerReqUs + $u.clientCpuPerReqUs) | round)/s vs INCR \($cores * 1e6 / ($rsrv + $rcli) | round)/s = \((($rsrv + $rcli) / ($u.serverCpuPerReqUs + $u.clientCpuPerReqUs)) | r2)"
	' "$TMP/report-$n.json"
done
echo
echo "load average at end (other processes share the $(nproc) cores): $(cut -d" " -f1-3 /proc/loadavg)"
