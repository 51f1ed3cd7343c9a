#!/usr/bin/env bash
# Root test of IDO's surrogate set under PostgreSQL (issue 17): a tablespace on a
# `raid5-ido-s` volume (3 array members + a 2-member RAID1 surrogate pair), pgbench running on
# it while array member 1 is failed, replaced and rebuilt hot-first. PostgreSQL must see no
# error; while degraded the surrogate pair takes the redirected writes (its members' ledgers
# and the D Map's metadata grow); after the rebuild the reclaim copies everything home, so
# that with BOTH surrogate members failed afterwards every page still reads right (the table's
# checksum, pgbench's balances, pg_amcheck) and scrub finds the array's parity right.
# A streaming standby, its tablespace on the same volume, follows the primary through all of it
# and is promoted after the rebuild and the reclaim: its tables equal the primary's.
# One line per test ("ok - …" / "not ok - …: why"), then "N passed, M failed".
#
#   bash contrib-storage/tests/ido-root.sh                    # as root
#   REBUILD=workout|vdf|pr bash …                             # another rebuild policy
#   GRS_BIN=/path/to/greenreplica-storage bash …              # a given binary
set -uo pipefail

. "$(dirname "$0")/lib.sh"

REBUILD=${REBUILD:-ido}
LAYOUT=raid5-ido-s
require_root_and_tools "the IDO tests" jq python3 losetup mkfs.ext4 runuser fusermount3
require_postgres
build_agent

WORK=$(mktemp -d "/tmp/grs-ido.XXXXXX")
chmod 755 "$WORK"
AGENT_PID=""
BENCH_PID=""
SOCK=$WORK/run/control.sock
MNT=$WORK/mnt/ido
pg_paths
grs() { "$BIN" --socket "$SOCK" "$@"; }
volume_field() { grs request '{"op":"volume","volume":"ido"}' | jq -r "$1"; }
surrogate_io() { volume_field '[.volume.members[3,4].ledger | "\(.reads) \(.writes)"] | join(" ")'; }

cleanup() {
	[ -n "$BENCH_PID" ] && kill -KILL "$BENCH_PID" 2>/dev/null
	[ -f "$PGDATA_DIR/postmaster.pid" ] && pg_ctl_do stop -m immediate 2>/dev/null
	[ -n "$STANDBY_DIR" ] && [ -f "$STANDBY_DIR/postmaster.pid" ] && standby_ctl stop -m immediate 2>/dev/null
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
size = "256MiB"
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

pg_setup_primary ido "$MNT/ts"
if start_standby "$MNT/ts" "$MNT/ts-standby" &&
	[ "$(pg_sql_at "$STANDBY_PORT" "SELECT pg_is_in_recovery()" 2>&1)" = t ]; then
	pass "a streaming standby runs, its tablespace on the same volume"
else
	fail "a streaming standby runs, its tablespace on the same volume" "$(tail -3 "$WORK/basebackup.log" "$PGSOCK/standby.log" 2>/dev/null)"
fi
sleep 1
read -r _ w3_before _ w4_before < <(surrogate_io)
meta_before=$(volume_field .volume.layout_metadata_bytes)

# pgbench for 30 s; member 1 fails after 6 s and is replaced 6 s later (rebuilt meanwhile).
start_pgbench_load 30
sleep 6
grs fail-member ido 1 >>"$WORK/fail.log" 2>&1
degraded=$(volume_field .volume.degraded)
sleep 3
meta_degraded=$(volume_field .volume.layout_metadata_bytes)
sleep 3
grs replace-member ido 1 >>"$WORK/replace.log" 2>&1
replaced=$(volume_field '.volume.members[1].health.health')
read -r _ w3_degraded _ w4_degraded < <(surrogate_io)
wait_pgbench_load

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
check_pgbench_ran "the failure, the redirection and the rebuild"
if why=$(wait_in_sync 1) && [ "$(volume_field .volume.degraded)" = false ]; then
	pass "the replacement is rebuilt to in_sync"
else
	fail "the replacement is rebuilt to in_sync" "$why: $(grep -i rebuild "$WORK/agent.log" | tail -2)"
fi

# The reclaim runs at the volume ticks once the array is in sync: wait until the surrogate
# members' ledgers and the layout's metadata stay still for 3 s (the D Map empty).
# (A fast shutdown sends the standby all the WAL first.)
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

# The standby followed all of it on the same volume. The primary's tables as the verification
# left them; the primary stops (its last WAL sent), the standby replays to its end and is
# promoted: the same tables, row for row, and it takes writes.
primary_print=$(fingerprint "$PGPORT")
primary_lsn=$(pg_sql "SELECT pg_current_wal_lsn()")
pg_ctl_do stop -m fast
if standby_replayed_to "$primary_lsn" && standby_ctl promote &&
	pg_sql_at "$STANDBY_PORT" "CREATE TABLE after_promotion TABLESPACE ido AS SELECT 1 AS x" >/dev/null 2>&1; then
	pass "the standby replayed the primary's WAL to its end and, promoted, takes writes on the volume"
else
	fail "the standby replayed the primary's WAL to its end and, promoted, takes writes on the volume" \
		"replayed to $(pg_sql_at "$STANDBY_PORT" "SELECT pg_last_wal_replay_lsn()" 2>&1), primary at $primary_lsn: $(tail -3 "$PGSOCK/standby.log")"
fi
standby_print=$(fingerprint "$STANDBY_PORT")
if [ "$standby_print" = "$primary_print" ] && [ "${primary_print#*kept:20000:}" != "$primary_print" ]; then
	pass "the promoted standby's tables equal the primary's (row counts and row hashes of kept and pgbench's four)"
else
	fail "the promoted standby's tables equal the primary's" "primary: $primary_print; standby: $standby_print"
fi
if amcheck=$(as_pg "$PG_BIN/pg_amcheck" -h "$PGSOCK" -p "$STANDBY_PORT" -d postgres --heapallindexed 2>&1) && [ -z "$amcheck" ]; then
	pass "pg_amcheck finds no corruption on the promoted standby"
else
	fail "pg_amcheck finds no corruption on the promoted standby" "$(echo "$amcheck" | head -3)"
fi
check_no_pg_error
standby_ctl stop -m fast

kill -TERM "$AGENT_PID"
if wait "$AGENT_PID"; then
	pass "SIGTERM stops the agent cleanly"
else
	fail "SIGTERM stops the agent cleanly" "$(tail -3 "$WORK/agent.log")"
fi
AGENT_PID=""

echo "$PASSED passed, $FAILED failed$([ "$SKIPPED" -gt 0 ] && echo ", $SKIPPED skipped")"
[ "$FAILED" -eq 0 ]
