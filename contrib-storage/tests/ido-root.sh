#!/usr/bin/env bash
# Root test of IDO's surrogate set under PostgreSQL (issue 17): a tablespace on a
# `raid5-ido-s` volume (3 array members + a 2-member RAID1 surrogate pair), pgbench running on
# it while array member 1 is failed, replaced and rebuilt hot-first. PostgreSQL must see no
# error; while degraded the surrogate pair takes the redirected writes (its members' ledgers
# and the D Map's metadata grow); after the rebuild the reclaim copies everything home, so
# that with BOTH surrogate members failed afterwards every page still reads right (the table's
# checksum, pgbench's balances, pg_amcheck) and scrub finds the array's parity right.
# One line per test ("ok - …" / "not ok - …: why"), then "N passed, M failed".
#
#   bash contrib-storage/tests/ido-root.sh                    # as root
#   REBUILD=workout|vdf|pr bash …                             # another rebuild policy
#   GRS_BIN=/path/to/greenreplica-storage bash …              # a given binary
set -uo pipefail

. "$(dirname "$0")/lib.sh"

REBUILD=${REBUILD:-ido}
PG_BIN=/usr/lib/postgresql/15/bin
PG_USER=${PG_USER:-grtest}
require_root_and_tools "the IDO tests" jq python3 losetup mkfs.ext4 runuser fusermount3
[ -x "$PG_BIN/pgbench" ] || give_up "no PostgreSQL 15 server and pgbench at $PG_BIN (make deps installs them)"
id "$PG_USER" >/dev/null 2>&1 || give_up "no user $PG_USER to run PostgreSQL as (PG_USER=… names another)"
build_agent

WORK=$(mktemp -d "/tmp/grs-ido.XXXXXX")
chmod 755 "$WORK"
AGENT_PID=""
BENCH_PID=""
SOCK=$WORK/run/control.sock
MNT=$WORK/mnt/ido
PGDATA_DIR=$WORK/pgdata
PGSOCK=$WORK/pgsock
PGPORT=$((20000 + RANDOM % 20000))

as_pg() { (cd / && runuser -u "$PG_USER" -- "$@"); }
pg_sql() { as_pg "$PG_BIN/psql" -X -A -t -v ON_ERROR_STOP=1 -h "$PGSOCK" -p "$PGPORT" -d postgres -c "$1"; }
pg_ctl_do() { as_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$PGSOCK/pg.log" -w -o "-p $PGPORT -k $PGSOCK -c listen_addresses='' -c shared_buffers=2MB -c checkpoint_timeout=30s" "$@" >/dev/null; }
grs() { "$BIN" --socket "$SOCK" "$@"; }
volume_field() { grs request '{"op":"volume","volume":"ido"}' | jq -r "$1"; }
surrogate_io() { volume_field '[.volume.members[3,4].ledger | "\(.reads) \(.writes)"] | join(" ")'; }

cleanup() {
	[ -n "$BENCH_PID" ] && kill -KILL "$BENCH_PID" 2>/dev/null
	[ -f "$PGDATA_DIR/postmaster.pid" ] && pg_ctl_do stop -m immediate 2>/dev/null
	[ -n "$AGENT_PID" ] && terminate 10 "$AGENT_PID"
	unmount_below "$WORK"
	[ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK"/{members,state,run,mnt/ido}
cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$SOCK"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"

[[volume]]
name = "ido"
layout = "raid5-ido-s"
chunk_size = 65536
policy = "always-on"
rebuild_mb_s = 40
rebuild_min_mb_s = 10
[volume.layout_options]
rebuild = "$REBUILD"
epoch_s = 5
[volume.export]
mount_point = "$MNT"
owner = "$PG_USER"
mode = "0700"
CONF
for i in 0 1 2 3 4; do
	cat >>"$WORK/agent.toml" <<CONF
[[volume.member]]
kind = "file"
path = "$WORK/members/ido-$i.img"
size = "160MiB"
profile = "test-fast"
$([ "$i" -ge 3 ] && echo 'role = "surrogate"')
CONF
done

wait_in_sync() { # wait_in_sync MEMBER
	local health=""
	for _ in $(seq 1 480); do
		health=$(volume_field ".volume.members[$1].health.health")
		[ "$health" = in_sync ] && return 0
		sleep 0.25
	done
	echo "member $1 is $health"
	return 1
}

if start_mounted_agent && [ "$(volume_field .volume.layout)" = raid5-ido-s ]; then
	pass "the agent serves a raid5-ido-s volume (3 + 2 surrogate members, rebuild = $REBUILD, epoch_s = 5), mounted"
else
	fail "the agent serves a raid5-ido-s volume, mounted" "$(tail -5 "$WORK/agent.log")"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi

install -d -o "$PG_USER" -m 0700 "$PGDATA_DIR" "$MNT/ts"
install -d -o "$PG_USER" -m 0755 "$PGSOCK"
as_pg "$PG_BIN/initdb" -D "$PGDATA_DIR" -k -A trust --no-sync >"$WORK/initdb.log" 2>&1 ||
	give_up "initdb failed: $(tail -3 "$WORK/initdb.log")"
pg_ctl_do start || give_up "PostgreSQL does not start: $(tail -3 "$PGSOCK/pg.log")"
pg_sql "CREATE TABLESPACE ido LOCATION '$MNT/ts'" >/dev/null
pg_sql "CREATE TABLE kept TABLESPACE ido AS SELECT i, repeat(md5(i::text), 20) AS filler FROM generate_series(1, 20000) i" >/dev/null
pg_sql "CHECKPOINT" >/dev/null
kept_sum=$(pg_sql "SELECT count(*) || ':' || sum(hashtext(filler)::bigint + i) FROM kept")
if as_pg "$PG_BIN/pgbench" -h "$PGSOCK" -p "$PGPORT" -i -q -s 8 --tablespace=ido --index-tablespace=ido postgres >"$WORK/pgbench-init.log" 2>&1; then
	pass "pgbench initialises its tables in the tablespace on the raid5-ido-s volume"
else
	fail "pgbench initialises its tables in the tablespace on the raid5-ido-s volume" "$(tail -3 "$WORK/pgbench-init.log")"
fi
sleep 1
read -r _ w3_before _ w4_before < <(surrogate_io)
meta_before=$(volume_field .volume.layout_metadata_bytes)

# pgbench for 30 s; member 1 fails after 6 s and is replaced 6 s later (rebuilt meanwhile).
# Few PostgreSQL buffers, checkpoints every 2 s and the kernel's caches dropped as often, so
# that pages really go to and come from the volume while it is degraded.
as_pg "$PG_BIN/pgbench" -h "$PGSOCK" -p "$PGPORT" -c 4 -j 2 -T 30 postgres >"$WORK/pgbench.log" 2>&1 &
BENCH_PID=$!
(
	while kill -0 "$BENCH_PID" 2>/dev/null; do
		sleep 2
		pg_sql "CHECKPOINT" >/dev/null 2>&1
		echo 3 >/proc/sys/vm/drop_caches
	done
) &
CHURN_PID=$!
sleep 6
grs fail-member ido 1 >>"$WORK/fail.log" 2>&1
degraded=$(volume_field .volume.degraded)
sleep 3
meta_degraded=$(volume_field .volume.layout_metadata_bytes)
sleep 3
grs replace-member ido 1 >>"$WORK/replace.log" 2>&1
replaced=$(volume_field '.volume.members[1].health.health')
read -r _ w3_degraded _ w4_degraded < <(surrogate_io)
wait "$BENCH_PID"
bench_rc=$?
BENCH_PID=""
wait "$CHURN_PID"

if [ "$degraded" = true ] && { [ "$replaced" = rebuilding ] || [ "$replaced" = in_sync ]; }; then
	pass "member 1 failed (volume degraded) and replaced under load"
else
	fail "member 1 failed (volume degraded) and replaced under load" "degraded=$degraded, member 1 $replaced ($(cat "$WORK/fail.log" "$WORK/replace.log"))"
fi
if [ "$REBUILD" = pr ]; then
	skip "while degraded the surrogate pair took redirected writes" "rebuild = pr redirects nothing"
elif [ "$((w3_degraded - w3_before))" -gt 0 ] && [ "$((w4_degraded - w4_before))" -gt 0 ] &&
	[ "$meta_degraded" -gt "$meta_before" ]; then
	pass "while degraded the surrogate pair took redirected writes (members 3/4: $((w3_degraded - w3_before))/$((w4_degraded - w4_before)) writes; layout metadata $meta_before -> $meta_degraded bytes with the D Map)"
else
	fail "while degraded the surrogate pair took redirected writes" "writes 3: $w3_before -> $w3_degraded, 4: $w4_before -> $w4_degraded; metadata $meta_before -> $meta_degraded"
fi
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$WORK/pgbench.log" | head -1)
failed_tx=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$WORK/pgbench.log")
if [ "$bench_rc" -eq 0 ] && [ "${failed_tx:-0}" = 0 ] && [ -n "$tps" ] &&
	! grep -qE 'ERROR|PANIC|could not (read|write)|invalid page' "$PGSOCK/pg.log"; then
	pass "pgbench ran through the failure, the redirection and the rebuild without an error ($tps tps)"
else
	fail "pgbench ran through the failure, the redirection and the rebuild without an error" \
		"rc $bench_rc, failed $failed_tx: $(tail -3 "$WORK/pgbench.log"; grep -E 'ERROR|PANIC|could not|invalid page' "$PGSOCK/pg.log" | head -3)"
fi
if why=$(wait_in_sync 1) && [ "$(volume_field .volume.degraded)" = false ]; then
	pass "the replacement is rebuilt to in_sync"
else
	fail "the replacement is rebuilt to in_sync" "$why: $(grep -i rebuild "$WORK/agent.log" | tail -2)"
fi

# The reclaim runs at the volume ticks once the array is in sync: wait until the surrogate
# members' ledgers and the layout's metadata stay still for 3 s (the D Map empty).
pg_ctl_do stop -m fast
last="" still=0
for _ in $(seq 1 240); do
	now="$(surrogate_io) $(volume_field .volume.layout_metadata_bytes)"
	if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; fi
	[ "$still" -ge 12 ] && break
	last=$now
	sleep 0.25
done
read -r r3_after _ r4_after _ < <(surrogate_io)
meta_after=$(volume_field .volume.layout_metadata_bytes)
if [ "$REBUILD" = pr ] || [ "$meta_after" -lt "$meta_degraded" ]; then
	pass "the reclaim ran after the rebuild (surrogate reads $r3_after/$r4_after; layout metadata $meta_degraded -> $meta_after bytes)"
else
	fail "the reclaim ran after the rebuild" "layout metadata $meta_degraded -> $meta_after bytes"
fi

# The array alone must hold everything now: both surrogate members fail, and every page is
# read from the array members (PostgreSQL restarted, the kernel's caches dropped).
grs fail-member ido 3 >/dev/null 2>&1
grs fail-member ido 4 >/dev/null 2>&1
verify() { # verify LABEL
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
if [ "$(volume_field '[.volume.members[3,4].health.health] | join(",")')" = "failed,failed" ]; then
	verify "both surrogate members failed after the reclaim"
else
	fail "both surrogate members can be failed" "$(volume_field '[.volume.members[3,4].health.health] | join(",")')"
fi
scrub=$(grs scrub ido --check-only 2>&1)
if [ "$(echo "$scrub" | jq -r '.report.mismatched_chunks, .report.read_errors' 2>/dev/null | tr '\n' ' ')" = "0 0 " ]; then
	pass "scrub --check-only finds the array's parity right"
else
	fail "scrub --check-only finds the array's parity right" "$scrub"
fi
if ! grep -qE 'ERROR|PANIC|could not (read|write)|invalid page' "$PGSOCK/pg.log"; then
	pass "PostgreSQL logged no error at any point"
else
	fail "PostgreSQL logged no error at any point" "$(grep -E 'ERROR|PANIC|could not|invalid page' "$PGSOCK/pg.log" | head -3)"
fi
pg_ctl_do stop -m fast

kill -TERM "$AGENT_PID"
if wait "$AGENT_PID"; then
	pass "SIGTERM stops the agent cleanly"
else
	fail "SIGTERM stops the agent cleanly" "$(tail -3 "$WORK/agent.log")"
fi
AGENT_PID=""

echo "$PASSED passed, $FAILED failed$([ "$SKIPPED" -gt 0 ] && echo ", $SKIPPED skipped")"
[ "$FAILED" -eq 0 ]
