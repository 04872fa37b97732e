#!/usr/bin/env bash
# scripts/bench.sh: the reference benchmark of likes, on loopback only.
#
# 1. Installs redis-server (apt-get) if, and only if, redis-server or
#    redis-benchmark is missing.
# 2. Starts a throwaway Redis on a free loopback port and measures unpipelined
#    INCR (redis-benchmark -t incr -n 200000 -c 50 -q): the reference, taken in
#    the same run on the same machine.
# 3. Builds likesd and likectl, starts `likesd dev` on a temporary data folder
#    with --user-rate -1, and runs `likectl bench` against it.
# 4. Stops both and prints the figures as ratios against the reference.
#
# Environment (all optional):
#   DURATION=10s   length of each likectl bench phase (3 phases)
#   WORKERS=64     likectl bench workers
#   ITEMS=10000    items of the uniform and read phases
#   BENCH_JSON=F   also keep the likectl JSON report at F
#   REDIS_N=200000 INCR requests of the reference
#
# Bounded: every wait loop has a fixed number of tries; the whole run takes about
# 3*DURATION + 30 s after the build. Idempotent: everything lives in a temporary
# folder removed on exit, and both servers are stopped by the EXIT trap.
set -euo pipefail

DURATION=${DURATION:-10s}
WORKERS=${WORKERS:-64}
ITEMS=${ITEMS:-10000}
REDIS_N=${REDIS_N:-200000}
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

# free_port prints a loopback TCP port nobody listens on (bounded tries).
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	log "no free port found"
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
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
	--dir "$TMP" --pidfile "$TMP/redis.pid" --logfile "$TMP/redis.log"
for i in $(seq 1 50); do
	[[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && break
	[[ $i -eq 50 ]] && { log "redis did not start"; cat "$TMP/redis.log" >&2; exit 1; }
	sleep 0.1
done
log "redis-benchmark -p $REDIS_PORT -t incr -n $REDIS_N -c 50 -q (unpipelined)"
REDIS_OUT=$(timeout 120 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -t incr -n "$REDIS_N" -c 50 -q | tr '\r' '\n' | grep -E '^INCR: [0-9.]+ requests per second' | tail -1 || true)
echo "$REDIS_OUT"
REDIS_RPS=$(sed -E 's/^INCR: ([0-9.]+) requests per second.*/\1/' <<<"$REDIS_OUT")
REDIS_P50=$(sed -nE 's/.*p50=([0-9.]+) msec.*/\1/p' <<<"$REDIS_OUT")
[[ -n "$REDIS_RPS" ]] || { log "could not parse redis-benchmark output"; exit 1; }
stop_redis # idle from here on; stopped now so it takes nothing from likesd

# --- 3. likes ----------------------------------------------------------------
log "building likesd and likectl"
(cd "$ROOT" && go build -o "$TMP/likesd" ./cmd/likesd && go build -o "$TMP/likectl" ./cmd/likectl)
LIKES_AUTH_SECRET="bench-$(date +%s%N)-$RANDOM"
export LIKES_AUTH_SECRET
LIKES_PORT=$(free_port)
"$TMP/likesd" dev --host 127.0.0.1 --http-port "$LIKES_PORT" --data "$TMP/data" --user-rate -1 \
	>"$TMP/likesd.out" 2>"$TMP/likesd.err" &
LIKESD_PID=$!
URL="http://127.0.0.1:$LIKES_PORT"
for i in $(seq 1 100); do
	curl -fsS --max-time 1 "$URL/healthz" >/dev/null 2>&1 && break
	if [[ $i -eq 100 ]] || ! kill -0 "$LIKESD_PID" 2>/dev/null; then
		log "likesd did not start"; cat "$TMP/likesd.err" >&2; exit 1
	fi
	sleep 0.1
done
log "likectl bench --url $URL --duration $DURATION --workers $WORKERS --items $ITEMS"
"$TMP/likectl" bench --url "$URL" --duration "$DURATION" --workers "$WORKERS" --items "$ITEMS" --json "$TMP/report.json"
kill -TERM "$LIKESD_PID"
for _ in $(seq 1 100); do kill -0 "$LIKESD_PID" 2>/dev/null || break; sleep 0.1; done
LIKESD_PID=""
[[ -n "${BENCH_JSON:-}" ]] && cp "$TMP/report.json" "$BENCH_JSON"

# --- 4. ratios ---------------------------------------------------------------
jq -r --argjson redis "$REDIS_RPS" --arg redisp50 "${REDIS_P50:-?}" --arg cores "$(nproc)" '
	def ph(n): (.phases[] | select(.name == n));
	def r2: (. * 100 | round) / 100;
	ph("uniform-writes") as $u | ph("viral-writes") as $v | ph("count-reads") as $c |
	"",
	"== likes vs Redis (same run, same machine: \($cores) cores, loopback) ==",
	"redis INCR (unpipelined, -c 50)      \($redis | round) req/s   p50 \($redisp50) ms",
	"like writes, uniform                 \($u.throughputPerS | round) req/s   p50 \($u.latency.p50Ms) ms  p99 \($u.latency.p99Ms) ms  errors \($u.errors)",
	"like writes, viral item              \($v.throughputPerS | round) req/s   p50 \($v.latency.p50Ms) ms  p99 \($v.latency.p99Ms) ms  errors \($v.errors)",
	"count reads                          \($c.throughputPerS | round) req/s   p50 \($c.latency.p50Ms) ms  p99 \($c.latency.p99Ms) ms  errors \($c.errors)",
	"",
	"ratio  like-writes/s / redis INCR/s   = \($u.throughputPerS / $redis | r2)   (target >= 0.5)",
	"ratio  viral / uniform throughput     = \($v.throughputPerS / $u.throughputPerS | r2)   (target >= 0.9)",
	"ratio  count-reads/s / redis INCR/s   = \($c.throughputPerS / $redis | r2)",
	"write p99 (uniform / viral)           = \($u.latency.p99Ms) / \($v.latency.p99Ms) ms   (target < 150)",
	"staleness p99 (uniform / viral)       = \($u.staleness.p99Ms) / \($v.staleness.p99Ms) ms   (target < 1000)",
	"staleness p99, first read of an item  = \($u.staleness.firstReadP99Ms) ms (uniform phase, \($u.staleness.firstReads) items)"
' "$TMP/report.json"
echo "load average at end (other processes share the $(nproc) cores): $(cut -d" " -f1-3 /proc/loadavg)"
