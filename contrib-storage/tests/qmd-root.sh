#!/usr/bin/env bash
# Root test of QMD's partial on-line mirrors under PostgreSQL (issue 16): two tablespaces on
# a QMD volume (two mirrored pairs + a flash member, 64 KiB stripe units, 16 MiB per disk
# kept for hot copies), the whole volume marked cold from SQL with the extension's
# greenreplica_set_volume_temperature() (the server preloads this tree's extension, which the
# test installs), then the hot tablespace's files marked hot through the control socket
# (`set_temperature`, extents from FIEMAP as greenreplica_set_tablespace_temperature() sends
# them). The hot tablespace's
# extents lie on both pairs; one pair stays up and holds copies of the other's hot stripe
# units, and the other pair sleeps whole. A workload on the hot tablespace (reads with the
# page cache dropped, updates, checkpoints) must leave the cold pair's two members in
# standby throughout (sampled, and their ledgers' spin-ups unchanged); the data is
# verified against a reference table kept outside the volume, again after the agent and
# PostgreSQL restart with every cache dropped.
# One line per test ("ok - …" / "not ok - …: why"), then "N passed, M failed".
#
#   bash contrib-storage/tests/qmd-root.sh                    # as root
#   GRS_BIN=/path/to/greenreplica-storage bash …              # a given binary
# It runs `make install` of the extension: on a machine shared with other worktrees, inside a
# private mount namespace (/work/tools/privns.sh NAME bash contrib-storage/tests/qmd-root.sh).
set -uo pipefail

. "$(dirname "$0")/lib.sh"

PG_BIN=/usr/lib/postgresql/15/bin
PG_USER=${PG_USER:-grtest}
WORKLOAD_S=${WORKLOAD_S:-30}
require_root_and_tools "the QMD tests" jq python3 losetup mkfs.ext4 runuser fusermount3 filefrag
[ -x "$PG_BIN/pgbench" ] || give_up "no PostgreSQL 15 server and pgbench at $PG_BIN (make deps installs them)"
id "$PG_USER" >/dev/null 2>&1 || give_up "no user $PG_USER to run PostgreSQL as (PG_USER=… names another)"
build_agent
REPO=$(cd "$(dirname "$0")/../.." && pwd)
make -C "$REPO" -s PG_CONFIG="$PG_BIN/pg_config" install >"/tmp/qmd-root-install.$$.log" 2>&1 ||
	give_up "make install of the extension failed: $(tail -3 "/tmp/qmd-root-install.$$.log")"
rm -f "/tmp/qmd-root-install.$$.log"

WORK=$(mktemp -d "/tmp/grs-qmd.XXXXXX")
chmod 755 "$WORK"
AGENT_PID=""
BENCH_PID=""
SOCK=$WORK/run/control.sock
MNT=$WORK/mnt/qmd
PGDATA_DIR=$WORK/pgdata
PGSOCK=$WORK/pgsock
PGPORT=$((20000 + RANDOM % 20000))

as_pg() { (cd / && runuser -u "$PG_USER" -- "$@"); }
pg_sql() { as_pg "$PG_BIN/psql" -X -A -t -v ON_ERROR_STOP=1 -h "$PGSOCK" -p "$PGPORT" -d postgres -c "$1"; }
pg_ctl_do() { as_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$PGSOCK/pg.log" -w -o "-p $PGPORT -k $PGSOCK -c listen_addresses='' -c shared_buffers=2MB -c checkpoint_timeout=30s -c shared_preload_libraries=greenreplica -c greenreplica.agent_socket=$SOCK -c greenreplica.agent_volume=qmd" "$@" >/dev/null; }
grs() { "$BIN" --socket "$SOCK" "$@"; }
volume_field() { grs request '{"op":"volume","volume":"qmd"}' | jq -r "$1"; }
member_states() { volume_field '[.volume.members[].state] | join(" ")'; }

cleanup() {
	[ -n "$BENCH_PID" ] && kill -KILL "$BENCH_PID" 2>/dev/null
	[ -f "$PGDATA_DIR/postmaster.pid" ] && pg_ctl_do stop -m immediate 2>/dev/null
	[ -n "$AGENT_PID" ] && terminate 10 "$AGENT_PID"
	unmount_below "$WORK"
	[ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK"/{members,state,run,mnt/qmd}
cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$SOCK"
# PostgreSQL (as $PG_USER, the volume's owner) marks the volume through the socket
group = "$(id -gn "$PG_USER")"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"

[[volume]]
name = "qmd"
layout = "qmd"
chunk_size = 65536
policy = "utilization:epoch_s=0.5,sleep_epochs=6,wake_epochs=2"
[volume.layout_options]
mirror_bytes = 16777216
[volume.export]
mount_point = "$MNT"
owner = "$PG_USER"
mode = "0700"
CONF
for i in 0 1 2 3 4; do
	cat >>"$WORK/agent.toml" <<CONF
[[volume.member]]
kind = "file"
path = "$WORK/members/qmd-$i.img"
size = "128MiB"
profile = "$([ "$i" -eq 4 ] && echo ssd || echo test-fast)"
CONF
done

if start_mounted_agent && [ "$(volume_field .volume.layout)" = qmd ]; then
	pass "the agent serves a qmd volume (2 pairs + flash, 16 MiB per disk for hot copies), mounted"
else
	fail "the agent serves a qmd volume, mounted" "$(tail -5 "$WORK/agent.log")"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi
CAP=$(volume_field .volume.capacity_bytes)

install -d -o "$PG_USER" -m 0700 "$PGDATA_DIR" "$MNT/hot" "$MNT/cold"
install -d -o "$PG_USER" -m 0755 "$PGSOCK"
as_pg "$PG_BIN/initdb" -D "$PGDATA_DIR" -k -A trust --no-sync >"$WORK/initdb.log" 2>&1 ||
	give_up "initdb failed: $(tail -3 "$WORK/initdb.log")"
pg_ctl_do start || give_up "PostgreSQL does not start: $(tail -3 "$PGSOCK/pg.log")"
pg_sql "CREATE EXTENSION greenreplica" >/dev/null
pg_sql "CREATE TABLESPACE hot LOCATION '$MNT/hot'" >/dev/null
pg_sql "CREATE TABLESPACE cold LOCATION '$MNT/cold'" >/dev/null
# The hot table (updated in place: fillfactor leaves room for HOT updates) and its
# reference copy outside the volume; a cold table written once.
pg_sql "CREATE TABLE hot_t (id int PRIMARY KEY, n bigint, filler text) WITH (fillfactor = 40) TABLESPACE hot" >/dev/null
pg_sql "ALTER INDEX hot_t_pkey SET TABLESPACE hot" >/dev/null
pg_sql "INSERT INTO hot_t SELECT i, 0, repeat(md5(i::text), 4) FROM generate_series(1, 20000) i" >/dev/null
pg_sql "CREATE TABLE ref_t AS SELECT * FROM hot_t" >/dev/null
pg_sql "CREATE TABLE cold_t TABLESPACE cold AS SELECT i, repeat(md5(i::text), 20) AS filler FROM generate_series(1, 20000) i" >/dev/null
pg_sql "VACUUM ANALYZE hot_t" >/dev/null
pg_sql "CHECKPOINT" >/dev/null
sync
cold_sum=$(pg_sql "SELECT count(*) || ':' || sum(hashtext(filler)::bigint + i) FROM cold_t")
hot_sum() { pg_sql "SELECT count(*) || ':' || sum(hashtext(filler)::bigint + id * 7 + n) FROM $1"; }

# Write the flash buffer back (the second disks slept while the tables were written), so
# that the hot pages are read from the disks, not from the flash, below.
buffered=""
for _ in $(seq 1 240); do
	grs request '{"op":"wake","volume":"qmd"}' >/dev/null
	buffered=$(volume_field .volume.layout_state.buffered_bytes)
	[ "$buffered" = 0 ] && break
	sleep 0.25
done
if [ "$buffered" = 0 ]; then
	pass "the flash buffer is written back to the pairs (0 bytes buffered)"
else
	fail "the flash buffer is written back to the pairs" "$buffered bytes still buffered"
fi

# The marks: the whole volume cold from SQL (no unmarked data: a pair with normal data never
# sleeps whole), then every extent of the hot tablespace's files hot (a later mark replaces
# an earlier one where they overlap).
extents_of() { # extents_of DIR: [[offset, len], ...] of its files on the volume
	find "$1" -type f -print0 | xargs -0 -r filefrag -b1 -e 2>/dev/null | python3 -c '
import json, re, sys
ext = []
for line in sys.stdin:
    m = re.match(r"\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*(\d+):", line)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        ext.append([a, b - a + 1])
print(json.dumps(ext))'
}
hot_extents=$(extents_of "$MNT/hot")
cold_answer=$(pg_sql "SELECT marked_bytes || ' ' || ranges FROM greenreplica_set_volume_temperature('cold')" 2>&1)
cold_bytes=$(volume_field .volume.temperatures.cold_bytes)
hot_answer=$(grs request "{\"op\":\"set_temperature\",\"volume\":\"qmd\",\"extents\":$hot_extents,\"temperature\":\"hot\"}")
if [ "$cold_answer" = "$CAP 1" ] && [ "$cold_bytes" = "$CAP" ] && echo "$hot_answer" | is '.ok' &&
	[ "$(echo "$hot_extents" | jq length)" -gt 0 ]; then
	pass "the volume marked cold from SQL ($CAP bytes) and the hot tablespace's $(echo "$hot_extents" | jq length) extents hot ($(volume_field .volume.temperatures.hot_bytes) bytes)"
else
	fail "the volume marked cold from SQL and the hot tablespace hot" "$cold_answer (agent: $cold_bytes cold bytes) / $hot_answer / $hot_extents"
fi

# Which pair sleeps: the layout names it once the hot copies are written.
SLEEPER=""
for _ in $(seq 1 240); do
	SLEEPER=$(volume_field '.volume.layout_state.cold_pairs | first // empty')
	[ -n "$SLEEPER" ] && break
	sleep 0.25
done
layout_state=$(grs request '{"op":"volume","volume":"qmd"}' | jq -c .volume.layout_state)
if [ -n "$SLEEPER" ] && echo "$layout_state" | is '.hot_copies > 0 and .hot_copies == .hot_copies_current'; then
	pass "pair $SLEEPER may sleep whole: its hot stripe units are copied onto the staying pair ($(echo "$layout_state" | jq -c '{hot_copies, sleeper_pairs, cold_pairs}'))"
else
	fail "a pair may sleep whole once its hot stripe units are copied" "$layout_state"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi
A=$((2 * SLEEPER))
S=$((2 * SLEEPER + 1))
H=$((2 * (1 - SLEEPER)))
both_standby() { [ "$(volume_field "[.volume.members[$A,$S].state] | join(\" \")")" = "standby standby" ]; }
for _ in $(seq 1 240); do
	both_standby && break
	sleep 0.25
done
if both_standby; then
	pass "the cold pair's members $A and $S sleep (standby)"
else
	fail "the cold pair's members sleep" "$(member_states)"
fi
# scan_check LABEL: every page of the hot table read from the volume (the page cache
# dropped, a sequential scan) equals its reference, and the cold pair sleeps through it: its
# hot stripe units come from their copies on the staying pair's active disk (or from the
# flash where written since).
scan_check() { # scan_check LABEL [copies]: with "copies", the staying pair's active disk served reads
	local label=$1 got want reads_before reads_after states served
	pg_sql "CHECKPOINT" >/dev/null
	sync
	echo 1 >/proc/sys/vm/drop_caches
	reads_before=$(volume_field "[.volume.members[].ledger.reads] | join(\" \")")
	got=$(hot_sum hot_t)
	want=$(hot_sum ref_t)
	reads_after=$(volume_field "[.volume.members[].ledger.reads] | join(\" \")")
	states=$(volume_field "[.volume.members[$A,$S].state] | join(\" \")")
	served=$(($(echo "$reads_after" | cut -d' ' -f$((H + 1))) - $(echo "$reads_before" | cut -d' ' -f$((H + 1)))))
	if [ "$got" = "$want" ] && [ "$states" = "standby standby" ] &&
		{ [ "${2:-}" != copies ] || [ "$served" -gt 0 ]; }; then
		pass "$label: a scan of the hot table equals its reference and the cold pair slept through it (member reads $reads_before -> $reads_after)"
	else
		fail "$label: a scan of the hot table equals its reference, the cold pair asleep" "$got vs $want; cold pair $states; member reads $reads_before -> $reads_after"
	fi
}
scan_check "before the workload" copies
spin_ups_before=$(volume_field "[.volume.members[$A,$S].ledger.spin_ups] | join(\" \")")

# The workload on the hot tablespace: pgbench updates both the hot table and its
# reference; reads after the page cache is dropped go to the volume; checkpoints write the
# hot pages back. The cold pair's states are sampled meanwhile.
cat >"$WORK/hot.sql" <<'SQL'
\set id random(1, 20000)
\set d random(1, 1000)
BEGIN;
UPDATE hot_t SET n = n + :d WHERE id = :id;
UPDATE ref_t SET n = n + :d WHERE id = :id;
END;
SELECT sum(n) FROM hot_t WHERE id BETWEEN :id AND :id + 200;
SQL
as_pg "$PG_BIN/pgbench" -h "$PGSOCK" -p "$PGPORT" -n -c 2 -j 2 -R 100 -T "$WORKLOAD_S" -f "$WORK/hot.sql" postgres >"$WORK/pgbench.log" 2>&1 &
BENCH_PID=$!
woke="" samples=0 i=0
while kill -0 "$BENCH_PID" 2>/dev/null; do
	sleep 0.5
	i=$((i + 1))
	if [ $((i % 6)) -eq 0 ]; then
		pg_sql "CHECKPOINT" >/dev/null 2>&1
		sync
		echo 1 >/proc/sys/vm/drop_caches
	fi
	samples=$((samples + 1))
	states=$(volume_field "[.volume.members[$A,$S].state] | join(\" \")")
	[ "$states" = "standby standby" ] || woke="$woke [$samples: $states]"
done
wait "$BENCH_PID"
bench_rc=$?
BENCH_PID=""
spin_ups_after=$(volume_field "[.volume.members[$A,$S].ledger.spin_ups] | join(\" \")")
tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/pgbench.log")
if [ "$bench_rc" -eq 0 ] && [ "${tx:-0}" -gt 100 ]; then
	pass "pgbench ran $tx transactions on the hot tablespace for ${WORKLOAD_S} s"
else
	fail "pgbench ran on the hot tablespace" "rc $bench_rc: $(tail -3 "$WORK/pgbench.log")"
fi
if [ -z "$woke" ] && [ "$samples" -gt 10 ] && [ "$spin_ups_before" = "$spin_ups_after" ]; then
	pass "the cold pair stayed in standby through the workload ($samples samples; spin-ups $spin_ups_after)"
else
	fail "the cold pair stayed in standby through the workload" "woke at$woke; spin-ups $spin_ups_before -> $spin_ups_after"
fi
if [ "$(volume_field ".volume.members[$H].state")" != standby ]; then
	pass "the staying pair's active disk (member $H) kept spinning"
else
	fail "the staying pair's active disk kept spinning" "$(member_states)"
fi
scan_check "after the workload"

# Everything from the members: PostgreSQL and the agent restart (the copies are stale after
# a restart and rewritten), every cache dropped, then both tables are checked.
pg_ctl_do stop -m fast
sync
kill -TERM "$AGENT_PID"
if wait "$AGENT_PID"; then
	pass "SIGTERM stops the agent cleanly"
else
	fail "SIGTERM stops the agent cleanly" "$(tail -3 "$WORK/agent.log")"
fi
AGENT_PID=""
echo 3 >/proc/sys/vm/drop_caches
if start_mounted_agent && pg_ctl_do start; then
	got_hot=$(hot_sum hot_t) want_hot=$(hot_sum ref_t) got_cold=$(pg_sql "SELECT count(*) || ':' || sum(hashtext(filler)::bigint + i) FROM cold_t")
	if [ "$got_hot" = "$want_hot" ] && [ "$got_cold" = "$cold_sum" ]; then
		pass "after a restart the hot table equals its reference and the cold table is as written"
	else
		fail "after a restart the data is as written" "hot $got_hot vs $want_hot, cold $got_cold vs $cold_sum"
	fi
	if [ "$(volume_field .volume.temperatures.ranges)" -gt 0 ]; then
		pass "the marks came back with the agent ($(volume_field .volume.temperatures.ranges) ranges)"
	else
		fail "the marks came back with the agent" "$(volume_field .volume.temperatures)"
	fi
	pg_ctl_do stop -m fast
else
	fail "the agent and PostgreSQL restart" "$(tail -3 "$WORK/agent.log")"
fi
if ! grep -qE 'ERROR|PANIC|could not (read|write)|invalid page' "$PGSOCK/pg.log"; then
	pass "PostgreSQL logged no error at any point"
else
	fail "PostgreSQL logged no error at any point" "$(grep -E 'ERROR|PANIC|could not|invalid page' "$PGSOCK/pg.log" | head -3)"
fi
[ -n "$AGENT_PID" ] && terminate 20 "$AGENT_PID"
AGENT_PID=""

echo "$PASSED passed, $FAILED failed$([ "$SKIPPED" -gt 0 ] && echo ", $SKIPPED skipped")"
[ "$FAILED" -eq 0 ]
