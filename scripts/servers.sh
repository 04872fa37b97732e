#!/usr/bin/env bash
# scripts/servers.sh: the production engines of likes (etcd, Redis, Kafka,
# Cassandra) on loopback, for the engine contract tests (make test-engines).
#
#   scripts/servers.sh up [etcd] [redis] [kafka] [cassandra]   (none named: all)
#   scripts/servers.sh down [NAME...]                          (none named: all)
#   scripts/servers.sh env      prints `export LIKES_TEST_…=…` for the servers up
#   scripts/servers.sh status   one line per server
#   scripts/servers.sh nodetool ARGS...   Cassandra's nodetool against the server up
#                                         (e.g. flush KEYSPACE, tablestats KEYSPACE)
#
# Installs what is missing, and only that: etcd-server and redis-server with
# apt-get (one `apt-get update` per run, only when something is missing); Kafka
# (org.apache.kafka:kafka_2.13 + kafka-tools) and Cassandra
# (org.apache.cassandra:cassandra-all) jars with `mvn dependency:copy-dependencies`
# on a generated pom, into $LIKES_SERVERS_HOME/{kafka,cassandra}/lib (default
# ~/.cache/likes-servers, outside the Go module).
#
# These are throwaway test servers, tuned to start fast and take schema
# changes fast on 2 cores (Cassandra: no flush of the schema tables per DDL,
# no fsync of system tables); never use these settings for data you keep.
#
# Every server listens on 127.0.0.1 only, keeps its data under
# $LIKES_SERVERS_HOME/run/NAME (wiped each time the server is started, so every
# start is clean), logs to run/NAME.log and is recorded in run/NAME.pid as
# "PID STARTTIME" (the kernel's start time, so a recycled PID is never taken for
# ours). `up` is idempotent: a server already up is checked and left alone.
# `down` stops exactly the processes recorded there. If `up` fails or is
# interrupted, the servers this invocation started are stopped again.
#
# Ports (environment overrides):
#   LIKES_ETCD_PORT=23790 LIKES_ETCD_PEER_PORT=23800 LIKES_REDIS_PORT=26379
#   LIKES_KAFKA_PORT=29092 LIKES_KAFKA_CONTROLLER_PORT=29093
#   LIKES_CASSANDRA_PORT=29042 LIKES_CASSANDRA_STORAGE_PORT=27000
#   LIKES_CASSANDRA_JMX_PORT=27199
# Cassandra's Paxos variant: LIKES_CASSANDRA_PAXOS=v1 (or v2)
# Cassandra's sizing: LIKES_CASSANDRA_SIZING=stock (the stock thread pools and
# skip-list memtables) or small (pools sized for 2 cores, trie memtables)
# Versions: LIKES_KAFKA_VERSION=4.4.0 LIKES_CASSANDRA_VERSION=5.0.9
# Readiness timeouts in seconds: LIKES_SERVERS_TIMEOUT_{ETCD,REDIS,KAFKA,CASSANDRA}
# Extra mvn arguments (e.g. -Dmaven.repo.local=DIR): LIKES_SERVERS_MVN_ARGS
set -euo pipefail

SERVERS_HOME=${LIKES_SERVERS_HOME:-$HOME/.cache/likes-servers}
RUN=$SERVERS_HOME/run
ALL=(etcd redis kafka cassandra)

ETCD_PORT=${LIKES_ETCD_PORT:-23790}
ETCD_PEER_PORT=${LIKES_ETCD_PEER_PORT:-23800}
REDIS_PORT=${LIKES_REDIS_PORT:-26379}
KAFKA_PORT=${LIKES_KAFKA_PORT:-29092}
KAFKA_CONTROLLER_PORT=${LIKES_KAFKA_CONTROLLER_PORT:-29093}
CASSANDRA_PORT=${LIKES_CASSANDRA_PORT:-29042}
CASSANDRA_STORAGE_PORT=${LIKES_CASSANDRA_STORAGE_PORT:-27000}
CASSANDRA_JMX_PORT=${LIKES_CASSANDRA_JMX_PORT:-27199}
CASSANDRA_PAXOS=${LIKES_CASSANDRA_PAXOS:-v1}
case $CASSANDRA_PAXOS in v1 | v2) ;; *)
	echo "servers.sh: LIKES_CASSANDRA_PAXOS must be v1 or v2, not $CASSANDRA_PAXOS" >&2
	exit 1
	;;
esac

CASSANDRA_SIZING=${LIKES_CASSANDRA_SIZING:-stock}
case $CASSANDRA_SIZING in stock | small) ;; *)
	echo "servers.sh: LIKES_CASSANDRA_SIZING must be stock or small, not $CASSANDRA_SIZING" >&2
	exit 1
	;;
esac

KAFKA_VERSION=${LIKES_KAFKA_VERSION:-4.4.0}
CASSANDRA_VERSION=${LIKES_CASSANDRA_VERSION:-5.0.9}
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

TIMEOUT_etcd=${LIKES_SERVERS_TIMEOUT_ETCD:-30}
TIMEOUT_redis=${LIKES_SERVERS_TIMEOUT_REDIS:-20}
TIMEOUT_kafka=${LIKES_SERVERS_TIMEOUT_KAFKA:-90}
TIMEOUT_cassandra=${LIKES_SERVERS_TIMEOUT_CASSANDRA:-240}
STOP_TIMEOUT=${LIKES_SERVERS_STOP_TIMEOUT:-30}

log() { printf 'servers.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# now_ms prints a monotonic-enough wall clock in milliseconds (for timings).
now_ms() { date +%s%3N; }
secs_since() { # start_ms -> "12.3s"
	local d=$(($(now_ms) - $1))
	printf '%d.%ds' $((d / 1000)) $((d % 1000 / 100))
}

# --- processes ---------------------------------------------------------------

# starttime PID prints the process's start time in clock ticks since boot
# (field 22 of /proc/PID/stat), or fails if there is no such process.
starttime() {
	local stat rest
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	rest=${stat##*) } # comm may hold spaces and parentheses
	# shellcheck disable=SC2206
	local f=($rest)
	echo "${f[19]}"
}

# pid_of NAME prints the PID of our running NAME, or fails.
pid_of() {
	local file=$RUN/$1.pid pid st cur
	[[ -f $file ]] || return 1
	read -r pid st <"$file" || return 1
	[[ -n ${pid:-} && -n ${st:-} ]] || return 1
	cur=$(starttime "$pid") || return 1
	[[ $cur == "$st" ]] || return 1
	# A zombie is not running. (The leader of a JVM shows Z while its other
	# threads still run the shutdown hooks: that process is still running.)
	if [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]]; then
		[[ $(awk '/^Threads:/ {print $2}' "/proc/$pid/status" 2>/dev/null) -gt 1 ]] || return 1
	fi
	echo "$pid"
}

# launch NAME CMD... starts CMD in its own session, detached from this shell,
# with output to run/NAME.log, and records it in run/NAME.pid.
launch() {
	local name=$1
	shift
	# The server must not inherit the lock of this script (see main).
	setsid "$@" {LOCKFD}>&- >"$RUN/$name.log" 2>&1 </dev/null &
	local pid=$!
	local st
	st=$(starttime "$pid") || die "$name exited at once: $(tail -n 20 "$RUN/$name.log")"
	echo "$pid $st" >"$RUN/$name.pid"
	STARTED+=("$name")
}

# stop NAME stops our NAME (TERM, then KILL after STOP_TIMEOUT s).
stop() {
	local name=$1 pid
	if ! pid=$(pid_of "$name"); then
		rm -f "$RUN/$name.pid"
		return 0
	fi
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	local i
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		pid_of "$name" >/dev/null || break
		sleep 0.1
	done
	if pid_of "$name" >/dev/null; then
		log "$name did not stop in ${STOP_TIMEOUT}s: KILL"
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			pid_of "$name" >/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$RUN/$name.pid"
}

# port_open PORT succeeds if something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

require_free() { # NAME PORT...
	local name=$1 p
	shift
	for p in "$@"; do
		if port_open "$p"; then
			die "$name: 127.0.0.1:$p is already in use by a process this script did not start; stop it or choose other ports (see the header of $0)"
		fi
	done
}

# --- installs ----------------------------------------------------------------

APT_UPDATED=0
apt_install() { # PACKAGE...
	local sudo=""
	[[ $(id -u) -eq 0 ]] || sudo=sudo
	if [[ $APT_UPDATED -eq 0 ]]; then
		log "apt-get update"
		$sudo apt-get update -qq
		APT_UPDATED=1
	fi
	log "apt-get install -y $*"
	# Debian's postinst scripts would start system services (etcd on 2379, redis
	# on 6379); a policy-rc.d that says 101 keeps them from starting.
	local policy=/usr/sbin/policy-rc.d made=0
	if [[ ! -e $policy && -z $sudo ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		made=1
	fi
	local rc=0
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null || rc=$?
	[[ $made -eq 0 ]] || rm -f "$policy"
	[[ $rc -eq 0 ]] || die "apt-get install $* failed ($rc)"
}

# install_apt NAME...: the Debian packages the named servers need and lack.
install_apt() {
	local pkgs=() name
	for name in "$@"; do
		case $name in
		etcd) command -v etcd >/dev/null || [[ -x /usr/bin/etcd ]] || pkgs+=(etcd-server) ;;
		redis) { command -v redis-server >/dev/null && command -v redis-cli >/dev/null; } || pkgs+=(redis-server redis-tools) ;;
		kafka | cassandra)
			command -v java >/dev/null || pkgs+=(openjdk-17-jdk-headless)
			command -v mvn >/dev/null || pkgs+=(maven)
			;;
		esac
	done
	command -v curl >/dev/null || pkgs+=(curl)
	if [[ ${#pkgs[@]} -gt 0 ]]; then
		local t
		t=$(now_ms)
		# shellcheck disable=SC2207
		pkgs=($(printf '%s\n' "${pkgs[@]}" | sort -u))
		apt_install "${pkgs[@]}"
		log "installed ${pkgs[*]} in $(secs_since "$t")"
	fi
}

# install_jars NAME VERSION GROUP:ARTIFACT[:VERSION]...: copies the artifacts
# (at VERSION unless they name their own) and their runtime dependencies into
# $SERVERS_HOME/NAME/lib, unless a previous run did so for the same list.
install_jars() {
	local name=$1 version=$2
	shift 2
	local dir=$SERVERS_HOME/$name
	local stamp
	stamp=$dir/lib/.complete-$(echo "$version $*" | cksum | cut -d' ' -f1)
	[[ -f $stamp ]] && return 0
	local t
	t=$(now_ms)
	log "$name $version: resolving jars with mvn (cold: a few minutes)"
	rm -rf "$dir/lib" "$dir/lib.tmp"
	mkdir -p "$dir"
	{
		echo '<project xmlns="http://maven.apache.org/POM/4.0.0">'
		echo '  <modelVersion>4.0.0</modelVersion>'
		echo "  <groupId>likes.servers</groupId><artifactId>$name</artifactId><version>1</version>"
		echo '  <packaging>pom</packaging>'
		echo '  <dependencies>'
		local gav g a v
		for gav in "$@"; do
			IFS=: read -r g a v <<<"$gav"
			echo "    <dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>${v:-$version}</version></dependency>"
		done
		echo '  </dependencies>'
		echo '</project>'
	} >"$dir/pom.xml"
	# shellcheck disable=SC2086
	if ! mvn -B -f "$dir/pom.xml" ${LIKES_SERVERS_MVN_ARGS:-} "$DEP_PLUGIN:copy-dependencies" \
		-DincludeScope=runtime -DoutputDirectory="$dir/lib.tmp" >"$dir/mvn.log" 2>&1; then
		tail -n 40 "$dir/mvn.log" >&2
		die "$name: mvn dependency:copy-dependencies failed (full log: $dir/mvn.log)"
	fi
	mv "$dir/lib.tmp" "$dir/lib"
	touch "$stamp"
	log "$name $version: $(find "$dir/lib" -name '*.jar' | wc -l) jars in $dir/lib ($(du -sh "$dir/lib" | cut -f1)) in $(secs_since "$t")"
}

install_one() {
	case $1 in
	kafka)
		# Kafka's poms leave the logging binding to the distribution: without
		# these the broker runs on slf4j 1.7 with no binding and logs nothing.
		install_jars kafka "$KAFKA_VERSION" org.apache.kafka:kafka_2.13 org.apache.kafka:kafka-tools \
			org.slf4j:slf4j-api:2.0.17 org.apache.logging.log4j:log4j-slf4j2-impl:2.25.5
		;;
	cassandra) install_jars cassandra "$CASSANDRA_VERSION" org.apache.cassandra:cassandra-all ;;
	esac
}

# --- readiness probes (each one attempt, bounded) ---------------------------

ready_etcd() {
	curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'
}

ready_redis() {
	[[ $(timeout 3 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

ready_kafka() {
	port_open "$KAFKA_PORT" || return 1
	# Cheap first: a JVM per poll would slow the broker's own start on 2 cores.
	grep -q 'Kafka Server started' "$RUN/kafka.log" 2>/dev/null || return 1
	timeout 30 java -Xmx128m -cp "$SERVERS_HOME/kafka/lib/*" \
		-Dlog4j2.configurationFile="$RUN/kafka-tools-log4j2.properties" \
		org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" --list >/dev/null 2>&1
}

# be32 N prints N as 4 big-endian bytes in printf escape form.
be32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }

# cql_query PORT QUERY: a minimal CQL native protocol v4 client: STARTUP, then
# QUERY at consistency ONE; prints the RESULT body's printable characters.
# Fails unless the server answers READY and then RESULT.
cql_query() {
	local port=$1 q=$2 fd hdr body
	{ exec {fd}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
	# STARTUP {CQL_VERSION: 3.0.0}: header (version 4, flags 0, stream 1, opcode 1, length 22).
	# shellcheck disable=SC2059
	printf '\x04\x00\x00\x01\x01\x00\x00\x00\x16\x00\x01\x00\x0bCQL_VERSION\x00\x053.0.0' >&"$fd"
	hdr=$(timeout 5 dd bs=9 count=1 iflag=fullblock <&"$fd" 2>/dev/null | od -An -tx1 | tr -d ' \n') || true
	if [[ ${hdr:8:2} != 02 ]]; then # opcode READY
		exec {fd}>&-
		return 1
	fi
	# QUERY: [long string][consistency ONE][flags 0], stream 2.
	local n=${#q}
	# shellcheck disable=SC2059
	printf "\\x04\\x00\\x00\\x02\\x07$(be32 $((n + 7)))$(be32 "$n")" >&"$fd"
	printf '%s\x00\x01\x00' "$q" >&"$fd"
	hdr=$(timeout 5 dd bs=9 count=1 iflag=fullblock <&"$fd" 2>/dev/null | od -An -tx1 | tr -d ' \n') || true
	if [[ ${#hdr} -ne 18 || ${hdr:8:2} != 08 ]]; then # opcode RESULT
		exec {fd}>&-
		return 1
	fi
	local len=$((16#${hdr:10:8}))
	body=$(timeout 5 dd bs="$len" count=1 iflag=fullblock <&"$fd" 2>/dev/null | tr -c '[:print:]' ' ') || true
	exec {fd}>&-
	printf '%s\n' "$body"
}

ready_cassandra() {
	port_open "$CASSANDRA_PORT" || return 1
	grep -q 'Starting listening for CQL clients' "$RUN/cassandra.log" 2>/dev/null || return 1
	cql_query "$CASSANDRA_PORT" "SELECT release_version FROM system.local" | grep -qE '[0-9]+\.[0-9]+\.[0-9]+'
}

# wait_ready NAME...: polls every named server's ready_NAME until all
# succeed; fails when one of them dies or passes its own timeout (counted from
# its start, in START_MS_NAME). Logs each one's time to ready.
wait_ready() {
	local pending=("$@") left n var t0 limit
	while ((${#pending[@]} > 0)); do
		left=()
		for n in "${pending[@]}"; do
			if ! pid_of "$n" >/dev/null; then
				tail -n 40 "$RUN/$n.log" >&2 || true
				die "$n exited before it was ready (log: $RUN/$n.log)"
			fi
			var=START_MS_$n
			t0=${!var}
			if "ready_$n"; then
				log "$n ready, $(secs_since "$t0") after its start"
				continue
			fi
			var=TIMEOUT_$n
			limit=${!var}
			if (($(now_ms) - t0 >= limit * 1000)); then
				tail -n 40 "$RUN/$n.log" >&2 || true
				die "$n not ready ${limit}s after its start (log: $RUN/$n.log)"
			fi
			left+=("$n")
		done
		pending=("${left[@]+"${left[@]}"}")
		((${#pending[@]} == 0)) || sleep 0.5
	done
}

# --- starts ------------------------------------------------------------------

fresh_dir() { # NAME: an empty data folder for NAME
	rm -rf "${RUN:?}/$1"
	mkdir -p "$RUN/$1"
}

start_etcd() {
	require_free etcd "$ETCD_PORT" "$ETCD_PEER_PORT"
	fresh_dir etcd
	local bin
	bin=$(command -v etcd || echo /usr/bin/etcd)
	launch etcd "$bin" --name likes --data-dir "$RUN/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "likes=http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster-state new --initial-cluster-token likes-test --logger zap
}

start_redis() {
	require_free redis "$REDIS_PORT"
	fresh_dir redis
	launch redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
		--daemonize no --dir "$RUN/redis" --protected-mode yes --loglevel notice
}

write_log4j2() { # FILE LEVEL: a console-only log4j2 configuration
	cat >"$1" <<EOF
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = $2
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = $2
logger.apache.name = org.apache.kafka
logger.apache.level = $2
EOF
}

start_kafka() {
	require_free kafka "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"
	fresh_dir kafka
	local lib=$SERVERS_HOME/kafka/lib props=$RUN/kafka/server.properties
	write_log4j2 "$RUN/kafka/log4j2.properties" info
	write_log4j2 "$RUN/kafka-tools-log4j2.properties" error
	cat >"$props" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$RUN/kafka/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
EOF
	local id
	id=$(java -cp "$lib/*" -Dlog4j2.configurationFile="$RUN/kafka-tools-log4j2.properties" \
		kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
	[[ -n $id ]] || die "kafka: StorageTool random-uuid printed nothing"
	java -cp "$lib/*" -Dlog4j2.configurationFile="$RUN/kafka-tools-log4j2.properties" \
		kafka.tools.StorageTool format -t "$id" -c "$props" >"$RUN/kafka.format.log" 2>&1 ||
		die "kafka: storage format failed: $(tail -n 20 "$RUN/kafka.format.log")"
	launch kafka java -Xms256m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$RUN/kafka/log4j2.properties" \
		-cp "$lib/*" kafka.Kafka "$props"
}

start_cassandra() {
	require_free cassandra "$CASSANDRA_PORT" "$CASSANDRA_STORAGE_PORT" "$CASSANDRA_JMX_PORT"
	fresh_dir cassandra
	local lib=$SERVERS_HOME/cassandra/lib dir=$RUN/cassandra jamm
	jamm=$(find "$lib" -name 'jamm-*.jar' | head -n 1)
	[[ -n $jamm ]] || die "cassandra: no jamm jar in $lib"
	cat >"$dir/cassandra.yaml" <<EOF
cluster_name: likes-test
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
commitlog_sync: periodic
commitlog_sync_period: 10000ms
endpoint_snitch: SimpleSnitch
# Paxos variant (LIKES_CASSANDRA_PAXOS, default v1): v2 promises two round
# trips per lightweight transaction instead of four, but on this one-node,
# 2-core test server it did not measure better than v1 (BENCHMARKS.md,
# issue 13), so v1 stays the default here.
paxos_variant: $CASSANDRA_PAXOS
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
start_native_transport: true
native_transport_port: $CASSANDRA_PORT
storage_port: $CASSANDRA_STORAGE_PORT
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$CASSANDRA_STORAGE_PORT"
EOF
	if [[ $CASSANDRA_SIZING == small ]]; then
		cat >>"$dir/cassandra.yaml" <<'EOF'
# LIKES_CASSANDRA_SIZING=small: thread pools for 2 cores, trie memtables.
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
native_transport_max_threads: 16
memtable:
  configurations:
    skiplist:
      class_name: SkipListMemtable
    trie:
      class_name: TrieMemtable
    default:
      inherits: trie
EOF
	fi
	cat >"$dir/logback.xml" <<'EOF'
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
EOF
	local jvm=(
		-Xms512m -Xmx1g -XX:+UseG1GC -Xss512k -Djava.awt.headless=true
		-Djava.net.preferIPv4Stack=true
		-Djdk.attach.allowAttachSelf=true
		-Dio.netty.tryReflectionSetAccessible=true
		"-javaagent:$jamm" "-Xbootclasspath/a:$jamm"
	)
	local m
	for m in java.base/jdk.internal.misc java.management.rmi/com.sun.jmx.remote.internal.rmi \
		java.rmi/sun.rmi.registry java.rmi/sun.rmi.server java.sql/java.sql java.base/java.lang.ref \
		jdk.unsupported/sun.misc jdk.compiler/com.sun.tools.javac.file jdk.attach/sun.tools.attach; do
		jvm+=(--add-exports "$m=ALL-UNNAMED")
	done
	for m in java.lang.module jdk.internal.loader jdk.internal.ref jdk.internal.reflect jdk.internal.math \
		jdk.internal.module jdk.internal.util.jar sun.nio.ch java.io java.lang.reflect java.lang java.util \
		java.nio java.util.concurrent java.util.concurrent.atomic; do
		jvm+=(--add-opens "java.base/$m=ALL-UNNAMED")
	done
	jvm+=(--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
		--add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED)
	launch cassandra java "${jvm[@]}" \
		"-Dcassandra.config=file://$dir/cassandra.yaml" \
		"-Dlogback.configurationFile=file://$dir/logback.xml" \
		-Dcassandra-foreground=yes \
		"-Dcassandra.storagedir=$dir" \
		"-Dcassandra.jmx.local.port=$CASSANDRA_JMX_PORT" \
		-Dcassandra.skip_wait_for_gossip_to_settle=0 \
		-Dcassandra.ring_delay_ms=100 \
		-Dcassandra.superuser_setup_delay_ms=0 \
		-Dcassandra.load_ring_state=false \
		-Dcassandra.initial_token=0 \
		-Dcassandra.test.flush_local_schema_changes=false \
		-Dcassandra.unsafesystem=true \
		-cp "$lib/*" org.apache.cassandra.service.CassandraDaemon
}

# --- subcommands -------------------------------------------------------------

STARTED=()
UP_OK=0

on_exit() {
	local rc=$?
	if [[ $UP_OK -eq 0 && ${#STARTED[@]} -gt 0 ]]; then
		log "up did not finish: stopping what this run started (${STARTED[*]})"
		local n
		for n in "${STARTED[@]}"; do stop "$n" || true; done
	fi
	exit "$rc"
}

names_or_all() { # validates names; prints them, or all when none
	local n
	if [[ $# -eq 0 ]]; then
		printf '%s\n' "${ALL[@]}"
		return
	fi
	for n in "$@"; do
		case $n in etcd | redis | kafka | cassandra) echo "$n" ;; *) die "unknown server '$n' (want: ${ALL[*]})" ;; esac
	done
}

cmd_up() {
	local names n t
	mapfile -t names < <(names_or_all "$@")
	[[ ${#names[@]} -gt 0 ]] || exit 1
	trap on_exit EXIT
	trap 'exit 130' INT TERM
	install_apt "${names[@]}"
	for n in "${names[@]}"; do install_one "$n"; done
	# Slowest first: they start in parallel, and are polled together.
	local order=() fresh=()
	for n in cassandra kafka etcd redis; do
		[[ " ${names[*]} " == *" $n "* ]] && order+=("$n")
	done
	for n in "${order[@]}"; do
		if pid_of "$n" >/dev/null; then
			if "ready_$n"; then
				log "$n already running and ready (pid $(pid_of "$n"))"
				continue
			fi
			log "$n already running (pid $(pid_of "$n")), not ready yet"
		else
			rm -f "$RUN/$n.pid"
			"start_$n"
			log "$n started (pid $(pid_of "$n"))"
		fi
		printf -v "START_MS_$n" '%s' "$(now_ms)"
		fresh+=("$n")
	done
	((${#fresh[@]} == 0)) || wait_ready "${fresh[@]}"
	UP_OK=1
}

cmd_down() {
	local names n
	mapfile -t names < <(names_or_all "$@")
	for n in "${names[@]}"; do stop "$n"; done
}

cmd_env() {
	local vars=()
	pid_of etcd >/dev/null && vars+=("LIKES_TEST_ETCD_ENDPOINTS=http://127.0.0.1:$ETCD_PORT")
	pid_of redis >/dev/null && vars+=("LIKES_TEST_REDIS_ADDR=127.0.0.1:$REDIS_PORT")
	pid_of kafka >/dev/null && vars+=("LIKES_TEST_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT")
	pid_of cassandra >/dev/null && vars+=("LIKES_TEST_CASSANDRA_HOSTS=127.0.0.1:$CASSANDRA_PORT")
	if [[ ${#vars[@]} -gt 0 ]]; then
		echo "export ${vars[*]}"
	fi
}

cmd_status() {
	local n pid state addr
	for n in "${ALL[@]}"; do
		case $n in
		etcd) addr=http://127.0.0.1:$ETCD_PORT ;;
		redis) addr=127.0.0.1:$REDIS_PORT ;;
		kafka) addr=127.0.0.1:$KAFKA_PORT ;;
		cassandra) addr=127.0.0.1:$CASSANDRA_PORT ;;
		esac
		if pid=$(pid_of "$n"); then
			if "ready_$n"; then state=ready; else state="running, not ready"; fi
			printf '%-10s %-19s pid %-8s %s\n' "$n" "$state" "$pid" "$addr"
		else
			printf '%-10s %-19s %-12s %s\n' "$n" stopped "" "$addr"
		fi
	done
}

# cmd_nodetool runs Cassandra's nodetool (in the cassandra-all jar) over JMX
# against the server up, with the module flags Java 11+ needs and its logging
# sent to stderr at WARN.
cmd_nodetool() {
	local lib=$SERVERS_HOME/cassandra/lib conf=$SERVERS_HOME/nodetool-logback.xml
	[[ -d $lib ]] || die "nodetool: Cassandra is not installed ($lib missing): scripts/servers.sh up cassandra"
	cat >"$conf" <<EOF
<configuration>
  <appender name="ERR" class="ch.qos.logback.core.ConsoleAppender"><target>System.err</target>
    <encoder><pattern>%msg%n</pattern></encoder></appender>
  <root level="WARN"><appender-ref ref="ERR"/></root>
</configuration>
EOF
	local flags=() m
	for m in jdk.internal.misc jdk.internal.ref; do flags+=(--add-exports "java.base/$m=ALL-UNNAMED"); done
	for m in sun.nio.ch java.nio jdk.internal.ref java.lang; do flags+=(--add-opens "java.base/$m=ALL-UNNAMED"); done
	exec java "${flags[@]}" "-Dlogback.configurationFile=$conf" -cp "$lib/*" \
		org.apache.cassandra.tools.NodeTool -h 127.0.0.1 -p "$CASSANDRA_JMX_PORT" "$@"
}

usage() {
	sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

main() {
	[[ $# -ge 1 ]] || usage
	local cmd=$1
	shift
	mkdir -p "$RUN"
	# nodetool changes no server's process: no lock (it may run beside `up`).
	[[ $cmd != nodetool ]] || cmd_nodetool "$@"
	# One invocation at a time changes the servers.
	LOCKFD=
	exec {LOCKFD}>"$SERVERS_HOME/.lock"
	flock -w 900 "$LOCKFD" || die "another servers.sh holds $SERVERS_HOME/.lock"
	case $cmd in
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	env) cmd_env ;;
	status) cmd_status ;;
	*) usage ;;
	esac
}

main "$@"
