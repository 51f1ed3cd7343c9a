# Shared by the agent's root test scripts (sourced, not run): result lines and counters,
# prerequisites, the agent binary under test, and the teardown of what a test mounted.
# Each script prints one line per test ("ok - …" / "not ok - …: why") and ends with
# "N passed, M failed".

HERE=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
WS=$(dirname "$HERE")
PASSED=0
FAILED=0
SKIPPED=0
pass() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
fail() { echo "not ok - $1: $2"; FAILED=$((FAILED + 1)); }
skip() { echo "ok - $1 # SKIP $2"; SKIPPED=$((SKIPPED + 1)); }

# is FILTER: standard input is a JSON value for which FILTER holds (empty input fails;
# jq -e alone lets it pass).
is() {
	local input
	input=$(cat)
	[ -n "$input" ] && printf '%s' "$input" | jq -e "$1" >/dev/null 2>&1
}
# prints FILTER COMMAND...: COMMAND prints a JSON value for which FILTER holds.
prints() {
	local filter=$1
	shift
	"$@" | is "$filter"
}

# Nothing could be tested: say why, count it as one failure, stop.
give_up() {
	echo "not ok - $1"
	echo "0 passed, 1 failed"
	exit 1
}

# require_root_and_tools WHAT TOOL...: root, /dev/fuse and the tools, or give up.
require_root_and_tools() {
	local what=$1 tool missing=""
	shift
	[ "$(id -u)" -eq 0 ] || give_up "$what must run as root (FUSE, loop devices, ext4); nothing was tested"
	for tool in "$@"; do
		command -v "$tool" >/dev/null || missing="$missing $tool"
	done
	if [ -n "$missing" ] || [ ! -e /dev/fuse ]; then
		give_up "missing prerequisites:${missing:- }$([ -e /dev/fuse ] || echo ' /dev/fuse') (see contrib-storage/apt-packages.txt)"
	fi
}

# BIN: the agent under test, GRS_BIN or a fresh debug build of the workspace.
build_agent() {
	export PATH=$HOME/.cargo/bin:$PATH
	BIN=${GRS_BIN:-}
	if [ -z "$BIN" ]; then
		(cd "$WS" && cargo build --quiet) || give_up "cargo build failed"
		BIN=$WS/target/debug/greenreplica-storage
	fi
}

# Unmount everything below DIR (deepest first) and detach loop devices on its files.
unmount_below() {
	local dir=$1
	awk -v w="$dir" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null; done
	losetup -a 2>/dev/null | grep -F "$dir" | cut -d: -f1 |
		while read -r dev; do losetup -d "$dev" 2>/dev/null; done
	awk -v w="$dir" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null; done
}

# start_mounted_agent: run "$BIN" serve with $WORK/agent.toml (log: $WORK/agent.log), AGENT_PID its
# pid; returns once this agent has mounted its volumes ("agent ready") and $MNT is mounted.
start_mounted_agent() {
	# (A mount left by a killed agent is still there when the next one starts: findmnt alone
	# would return before the new agent has checked and mounted the filesystem.)
	local ready_before
	ready_before=$(grep -c "agent ready" "$WORK/agent.log" 2>/dev/null)
	"$BIN" serve --config "$WORK/agent.toml" >>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	for _ in $(seq 1 240); do
		kill -0 "$AGENT_PID" 2>/dev/null || return 1
		if [ "$(grep -c "agent ready" "$WORK/agent.log")" -gt "${ready_before:-0}" ] &&
			findmnt -n "$MNT" >/dev/null; then
			return 0
		fi
		sleep 0.25
	done
	return 1
}

# terminate SECONDS PID...: SIGTERM, up to SECONDS for them to exit, then SIGKILL.
terminate() {
	local seconds=$1 pid alive
	shift
	for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
	for _ in $(seq 1 $((seconds * 4))); do
		alive=0
		for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ "$alive" -eq 0 ] && break
		sleep 0.25
	done
	for pid in "$@"; do kill -KILL "$pid" 2>/dev/null; done
}

# start_crash_writers ROUND DIRECT: what runs while the agent is killed: two buffered random
# writers (fsync every 4 writes) on $MNT/busy1 and busy2, and DIRECT direct writers hammering
# the same 1 MiB of $MNT/same; their pids in WRITERS, their output in $WORK/writers.log.
# --thread: a fio job runs as a thread of the pid we hold, so killing that pid stops it (a
# forked job is its own session and outlived the kill, blocked on the dead mount for the
# rest of the run).
start_crash_writers() {
	local round=$1 direct=$2 job
	WRITERS=()
	for job in 1 2; do
		fio --thread --ioengine=psync --bs=16k --name="w$job" --filename="$MNT/busy$job" --size=24M \
			--rw=randwrite --fsync=4 --time_based --runtime=30 --randseed=$((round * 10 + job)) \
			>>"$WORK/writers.log" 2>&1 &
		WRITERS+=($!)
	done
	for job in $(seq 1 "$direct"); do
		fio --thread --ioengine=psync --bs=4k --direct=1 --name="same$job" --filename="$MNT/same" --size=1M \
			--rw=randwrite --time_based --runtime=30 --randseed=$((round * 10 + job)) \
			>>"$WORK/writers.log" 2>&1 &
		WRITERS+=($!)
	done
}

# crash_agent_under_writers: kill -9 the agent (AGENT_PID) mid-write, then the writers.
crash_agent_under_writers() {
	local pid
	kill -KILL "$AGENT_PID"
	wait "$AGENT_PID" 2>/dev/null
	for pid in "${WRITERS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
	for pid in "${WRITERS[@]}"; do wait "$pid" 2>/dev/null; done
	WRITERS=()
}

# --- PostgreSQL on an agent volume (raid5-root.sh, ido-root.sh) ---
# A cluster run by PG_USER in $PGDATA_DIR (outside the volume), its sockets and logs in
# $PGSOCK, port $PGPORT; its tablespace on the volume. The caller sets WORK first.
PG_BIN=/usr/lib/postgresql/15/bin
PG_USER=${PG_USER:-grtest}

# require_postgres: the server, pgbench and the user to run them as, or give up.
require_postgres() {
	[ -x "$PG_BIN/pgbench" ] || give_up "no PostgreSQL 15 server and pgbench at $PG_BIN (make deps installs them)"
	id "$PG_USER" >/dev/null 2>&1 || give_up "no user $PG_USER to run PostgreSQL as (PG_USER=… names another)"
}
pg_paths() {
	PGDATA_DIR=$WORK/pgdata
	PGSOCK=$WORK/pgsock
	PGPORT=$((20000 + RANDOM % 20000))
}
as_pg() { (cd / && runuser -u "$PG_USER" -- "$@"); }
# pg_sql_at PORT SQL / pg_sql SQL (the primary): one statement, unaligned tuples only.
pg_sql_at() { as_pg "$PG_BIN/psql" -X -A -t -v ON_ERROR_STOP=1 -h "$PGSOCK" -p "$1" -d postgres -c "$2"; }
pg_sql() { pg_sql_at "$PGPORT" "$1"; }
# pg_ctl_at DATADIR PORT LOG ARGS...: few buffers and frequent checkpoints, so that pages
# really go to and come from the volume.
pg_ctl_at() {
	local dir=$1 port=$2 log=$3
	shift 3
	as_pg "$PG_BIN/pg_ctl" -D "$dir" -l "$log" -w -o "-p $port -k $PGSOCK -c listen_addresses='' -c shared_buffers=2MB -c checkpoint_timeout=30s" "$@" >/dev/null
}
pg_ctl_do() { pg_ctl_at "$PGDATA_DIR" "$PGPORT" "$PGSOCK/pg.log" "$@"; }

# pg_setup_primary TABLESPACE DIR: initdb, start, a tablespace in DIR (on the volume), the
# table "kept" in it (its checksum in kept_sum), then pgbench's tables in it (scale 8).
pg_setup_primary() {
	local ts=$1 dir=$2
	install -d -o "$PG_USER" -m 0700 "$PGDATA_DIR" "$dir"
	install -d -o "$PG_USER" -m 0755 "$PGSOCK"
	as_pg "$PG_BIN/initdb" -D "$PGDATA_DIR" -k -A trust --no-sync >"$WORK/initdb.log" 2>&1 ||
		give_up "initdb failed: $(tail -3 "$WORK/initdb.log")"
	pg_ctl_do start || give_up "PostgreSQL does not start: $(tail -3 "$PGSOCK/pg.log")"
	pg_sql "CREATE TABLESPACE $ts LOCATION '$dir'" >/dev/null
	pg_sql "CREATE TABLE kept TABLESPACE $ts AS SELECT i, repeat(md5(i::text), 20) AS filler FROM generate_series(1, 20000) i" >/dev/null
	pg_sql "CHECKPOINT" >/dev/null
	kept_sum=$(pg_sql "SELECT count(*) || ':' || sum(hashtext(filler)::bigint + i) FROM kept")
	if as_pg "$PG_BIN/pgbench" -h "$PGSOCK" -p "$PGPORT" -i -q -s 8 --tablespace="$ts" --index-tablespace="$ts" postgres >"$WORK/pgbench-init.log" 2>&1; then
		pass "pgbench initialises its tables in the tablespace on the $LAYOUT volume"
	else
		fail "pgbench initialises its tables in the tablespace on the $LAYOUT volume" "$(tail -3 "$WORK/pgbench-init.log")"
	fi
}

# start_pgbench_load SECONDS: pgbench (4 clients) in the background (BENCH_PID), and beside it
# a CHECKPOINT and a drop of the kernel's caches every 2 s (CHURN_PID), so that pages really
# go to and come from the volume while it is degraded.
start_pgbench_load() {
	as_pg "$PG_BIN/pgbench" -h "$PGSOCK" -p "$PGPORT" -c 4 -j 2 -T "$1" postgres >"$WORK/pgbench.log" 2>&1 &
	BENCH_PID=$!
	(
		while kill -0 "$BENCH_PID" 2>/dev/null; do
			sleep 2
			pg_sql "CHECKPOINT" >/dev/null 2>&1
			echo 3 >/proc/sys/vm/drop_caches
		done
	) &
	CHURN_PID=$!
}
# wait_pgbench_load: its exit status in bench_rc.
wait_pgbench_load() {
	wait "$BENCH_PID"
	bench_rc=$?
	BENCH_PID=""
	wait "$CHURN_PID"
}
pg_errors() { grep -hE 'ERROR|PANIC|could not (read|write)|invalid page' "$PGSOCK"/*.log; }
# check_pgbench_ran WHAT: pgbench exited 0 with no failed transaction and no error logged.
check_pgbench_ran() {
	local tps failed_tx
	tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$WORK/pgbench.log" | head -1)
	failed_tx=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$WORK/pgbench.log")
	if [ "$bench_rc" -eq 0 ] && [ "${failed_tx:-0}" = 0 ] && [ -n "$tps" ] && [ -z "$(pg_errors)" ]; then
		pass "pgbench ran through $1 without an error ($tps tps)"
	else
		fail "pgbench ran through $1 without an error" \
			"rc $bench_rc, failed $failed_tx: $(tail -3 "$WORK/pgbench.log"; pg_errors | head -3)"
	fi
}

# verify LABEL: the table checksum, pgbench's balances and pg_amcheck, with PostgreSQL's
# buffers and the kernel's caches dropped so that every page is read from the members again.
verify() {
	local label=$1 sum balances amcheck
	[ -f "$PGDATA_DIR/postmaster.pid" ] && pg_ctl_do stop -m fast
	sync
	echo 3 >/proc/sys/vm/drop_caches
	pg_ctl_do start
	sum=$(pg_sql "SELECT count(*) || ':' || sum(hashtext(filler)::bigint + i) FROM kept" 2>&1)
	if [ "$sum" = "$kept_sum" ]; then
		pass "$label: the table written before the failure has the same rows and checksum"
	else
		fail "$label: the table written before the failure has the same rows and checksum" "want $kept_sum, got $sum"
	fi
	balances=$(pg_sql "SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(bbalance) FROM pgbench_branches)
		AND (SELECT sum(bbalance) FROM pgbench_branches) = (SELECT sum(tbalance) FROM pgbench_tellers)
		AND (SELECT sum(tbalance) FROM pgbench_tellers) = (SELECT coalesce(sum(delta), 0) FROM pgbench_history)
		AND (SELECT count(*) FROM pgbench_accounts) = 800000" 2>&1)
	if [ "$balances" = t ]; then
		pass "$label: pgbench's balances agree (accounts = branches = tellers = history)"
	else
		fail "$label: pgbench's balances agree" "$balances"
	fi
	pg_sql "CREATE EXTENSION IF NOT EXISTS amcheck" >/dev/null 2>&1
	if amcheck=$(as_pg "$PG_BIN/pg_amcheck" -h "$PGSOCK" -p "$PGPORT" -d postgres --heapallindexed 2>&1) && [ -z "$amcheck" ]; then
		pass "$label: pg_amcheck finds no corruption in tables and indexes"
	else
		fail "$label: pg_amcheck finds no corruption" "$(echo "$amcheck" | head -3)"
	fi
}
check_no_pg_error() {
	if [ -z "$(pg_errors)" ]; then
		pass "PostgreSQL logged no error at any point"
	else
		fail "PostgreSQL logged no error at any point" "$(pg_errors | head -3)"
	fi
}

# A streaming standby of the primary: data directory $STANDBY_DIR (outside the volume), port
# $STANDBY_PORT, log $PGSOCK/standby.log, its tablespace mapped to another directory.
STANDBY_DIR=""
STANDBY_PORT=""
standby_ctl() { pg_ctl_at "$STANDBY_DIR" "$STANDBY_PORT" "$PGSOCK/standby.log" "$@"; }
# start_standby FROM_DIR TO_DIR: base backup with the tablespace in TO_DIR, then start it.
start_standby() {
	STANDBY_DIR=$WORK/standby
	STANDBY_PORT=$((PGPORT + 1))
	install -d -o "$PG_USER" -m 0700 "$STANDBY_DIR" "$2"
	as_pg "$PG_BIN/pg_basebackup" -h "$PGSOCK" -p "$PGPORT" -D "$STANDBY_DIR" -X stream -R \
		--checkpoint=fast --no-sync -T "$1=$2" >"$WORK/basebackup.log" 2>&1 &&
		standby_ctl start
}
# fingerprint PORT: every user table's row count and a hash of its rows (ordered by the
# table's name), one line.
fingerprint() {
	pg_sql_at "$1" "SELECT string_agg(f, ' ' ORDER BY f) FROM (
		SELECT 'kept:' || count(*) || ':' || sum(hashtext(k::text)::bigint) AS f FROM kept k
		UNION ALL SELECT 'accounts:' || count(*) || ':' || sum(hashtext(a::text)::bigint) FROM pgbench_accounts a
		UNION ALL SELECT 'branches:' || count(*) || ':' || sum(hashtext(b::text)::bigint) FROM pgbench_branches b
		UNION ALL SELECT 'tellers:' || count(*) || ':' || sum(hashtext(t::text)::bigint) FROM pgbench_tellers t
		UNION ALL SELECT 'history:' || count(*) || ':' || coalesce(sum(hashtext(h::text)::bigint), 0) FROM pgbench_history h) s" 2>&1
}
# standby_replayed_to LSN: the standby has replayed up to LSN (within 60 s).
standby_replayed_to() {
	for _ in $(seq 1 240); do
		[ "$(pg_sql_at "$STANDBY_PORT" "SELECT pg_last_wal_replay_lsn() >= '$1'" 2>/dev/null)" = t ] && return 0
		sleep 0.25
	done
	return 1
}
