#!/usr/bin/env bash
# Root test of the agent's RAID5 (or RAID6, LAYOUT=raid6; or RoLo-P, LAYOUT=rolo-p) under
# PostgreSQL (issues 12, 15): a tablespace on the volume, pgbench running on it while a member
# (RAID6: two; RoLo-P: the on-duty logger, after several rotations) is failed, replaced and
# rebuilt. PostgreSQL must see no
# error; afterwards pgbench's balances agree, a table's checksum is what it was, pg_amcheck
# finds nothing, scrub finds the parity right, and with another member failed (so every read
# of it is reconstructed through the rebuilt one) the data still verifies. Then the agent is
# killed (-9) under writers several times: after each restart the resync must leave the
# parity right, and PostgreSQL's data must still verify.
# One line per test ("ok - …" / "not ok - …: why"), then "N passed, M failed".
#
#   bash contrib-storage/tests/raid5-root.sh                  # as root
#   LAYOUT=raid6 bash contrib-storage/tests/raid5-root.sh     # RAID6 on 4, two members lost
#   LAYOUT=rolo-p bash contrib-storage/tests/raid5-root.sh    # RoLo-P on 3 pairs, the logger lost
#   LAYOUT=raid5-tracks bash …   # track-aligned RAID5 (issue 18): members are Atlas 10K V
#                                # units 0..2, their boundary lists stored in the members
#   LAYOUT=raid5-tracks STRIPE=per_member bash …   # its rows on each member's own tracks
#   GRS_BIN=/path/to/greenreplica-storage ROUNDS=3 bash …     # a given binary, fewer crashes
set -uo pipefail

. "$(dirname "$0")/lib.sh"

LAYOUT=${LAYOUT:-raid5}
case "$LAYOUT" in
raid5 | raid5-tracks) MEMBERS=3 LOST="1" AGAIN="0" ;; # members failed under load, then after the rebuild
raid6) MEMBERS=4 LOST="1 3" AGAIN="0 2" ;;
# RoLo-P: LOST is the on-duty logger when it fails, AGAIN the primary of its pair (so that
# every read of that pair comes from the rebuilt logger and the other pairs' logs). Small
# logs that rotate at 20 % fill, so the duty goes round several times within the run.
rolo-p) MEMBERS=6 LOST="" AGAIN="" ;;
*) echo "LAYOUT must be raid5, raid5-tracks, raid6 or rolo-p" >&2; exit 2 ;;
esac
POLICY=always-on
[ "$LAYOUT" = rolo-p ] && POLICY=mirrors:10 # off-duty mirrors sleep, as in production
# Track-aligned layouts take each member's tracks from its drive model (unit = drive_seed).
PROFILE=test-fast
[ "$LAYOUT" = raid5-tracks ] && PROFILE=maxtor-atlas-10k-v
require_root_and_tools "the $LAYOUT tests" fio jq python3 fsfreeze losetup mkfs.ext4 runuser fusermount3
require_postgres
build_agent

WORK=$(mktemp -d "/tmp/grs-$LAYOUT.XXXXXX")
chmod 755 "$WORK"
AGENT_PID=""
BENCH_PID=""
WRITERS=()
SOCK=$WORK/run/control.sock
MNT=$WORK/mnt/r5
pg_paths
grs() { "$BIN" --socket "$SOCK" "$@"; }
volume_field() { grs request '{"op":"volume","volume":"r5"}' | jq -r "$1"; }
members_health() { volume_field "[.volume.members[$(echo "$1" | sed 's/ /,/g')].health.health] | join(\",\")"; }
times() { printf "$1%.0s" $(seq 1 "$2") | sed 's/,$//'; } # times WORD, N: "WORD,WORD,…"

# Every stripe's parity, checked from the member images themselves (not through the agent's
# scrub): in a 3-member RAID5 each stripe row holds d0, d1 and d0 ^ d1, so the XOR of the
# three members' data areas (past the 1 MiB header) is zero everywhere. Filesystem frozen.
# (RAID6's Q is not an XOR: there only scrub checks.) STRIPE=per_member: row by row.
parity_of_images() {
	case "$LAYOUT" in raid5 | raid5-tracks) ;; *) return 0 ;; esac # callers say so
	fsfreeze -f "$MNT" || return 1
	STRIPE=${STRIPE:-} python3 - "$WORK"/members/r5-{0,1,2}.img <<'PY'
import os, struct, sys
files = [open(p, "rb") for p in sys.argv[1:]]
bad = 0
if os.environ["STRIPE"] == "per_member":
    # Row k is track k of every member (each at its own offset, from the boundary list the
    # member stores at 64 KiB), as long as the row's shortest track: XOR the rows.
    def tracks(f):
        f.seek(64 << 10)
        head = f.read(36)
        if head[:8] != b"GRTRACKS":
            sys.exit(2)  # no list stored (the caller says so)
        sector, runs = struct.unpack_from("<II", head, 12)
        used = (os.fstat(f.fileno()).st_size - (1 << 20)) // sector
        starts, at = [], 0
        for i in range(runs):
            size, count = struct.unpack("<QQ", f.read(16))
            for _ in range(count):
                if at + size > used:
                    return starts + [at * sector]
                starts.append(at * sector)
                at += size
        return starts + [at * sector]
    maps = [tracks(f) for f in files]
    rows = min(len(m) for m in maps) - 1
    for k in range(rows):
        unit = min(m[k + 1] - m[k] for m in maps)
        x = 0
        for f, m in zip(files, maps):
            f.seek((1 << 20) + m[k])
            x ^= int.from_bytes(f.read(unit), "little")
        bad += x != 0
    sys.exit(1 if bad else 0)
for f in files:
    f.seek(1 << 20)
while True:
    blocks = [f.read(1 << 20) for f in files]
    if not blocks[0]:
        break
    x = 0
    for b in blocks:
        x ^= int.from_bytes(b, "little")
    bad += x != 0
sys.exit(1 if bad else 0)
PY
	local rc=$?
	fsfreeze -u "$MNT"
	return $rc
}
cleanup() {
	[ -n "$BENCH_PID" ] && kill -KILL "$BENCH_PID" 2>/dev/null
	[ -f "$PGDATA_DIR/postmaster.pid" ] && pg_ctl_do stop -m immediate 2>/dev/null
	for pid in "${WRITERS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
	[ -n "$AGENT_PID" ] && terminate 10 "$AGENT_PID"
	unmount_below "$WORK"
	[ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK"/{members,state,run,mnt/r5}
cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$SOCK"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"

[[volume]]
name = "r5"
layout = "$LAYOUT"
chunk_size = 65536
policy = "$POLICY"
rebuild_mb_s = 40
rebuild_min_mb_s = 10
[volume.export]
mount_point = "$MNT"
owner = "$PG_USER"
mode = "0700"
CONF
[ "$LAYOUT" = rolo-p ] && cat >>"$WORK/agent.toml" <<CONF
[volume.layout_options]
log_share = 0.25
rotate_at = 0.2
CONF
# STRIPE=per_member: raid5-tracks' rows on each member's own tracks (issue 18).
[ -n "${STRIPE:-}" ] && cat >>"$WORK/agent.toml" <<CONF
[volume.layout_options]
stripe = "$STRIPE"
CONF
for i in $(seq 0 $((MEMBERS - 1))); do
	cat >>"$WORK/agent.toml" <<CONF
[[volume.member]]
kind = "file"
path = "$WORK/members/r5-$i.img"
size = "160MiB"
profile = "$PROFILE"
drive_seed = $i
CONF
done

wait_in_sync() { # wait_in_sync MEMBER: until the member's rebuild is done
	local health=""
	for _ in $(seq 1 480); do
		health=$(volume_field ".volume.members[$1].health.health")
		[ "$health" = in_sync ] && return 0
		sleep 0.25
	done
	echo "member $1 is $health"
	return 1
}

if start_mounted_agent && [ "$(volume_field .volume.layout)" = "$LAYOUT" ]; then
	pass "the agent serves a $MEMBERS-member $LAYOUT volume, mounted"
else
	fail "the agent serves a $MEMBERS-member $LAYOUT volume, mounted" "$(tail -5 "$WORK/agent.log")"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi

# The cluster lives outside the volume; its tablespace (every table and index pgbench
# makes, and the verification table) on the RAID5 volume.
pg_setup_primary r5 "$MNT/ts"

# RoLo-P's duty and rotations as the agent reports them (volume status, layout_state).
on_duty_logger() { volume_field '.volume.layout_state.on_duty_logger // empty'; }
rotations() { volume_field '.volume.layout_state.rotations // 0'; }

# pgbench for 40 s; the LOST members fail after 6 s, are replaced after 12 s and rebuild
# meanwhile.
member2_io() { volume_field '.volume.members[2].ledger | "\(.reads) \(.writes)"'; }
start_pgbench_load 40
sleep 6
if [ "$LAYOUT" = rolo-p ]; then
	# several rotations first (pgbench -i alone writes the logs full several times over),
	# then the logger on duty right now fails.
	# (under load the writes may lag: wait up to 60 s for the third rotation)
	for _ in $(seq 1 120); do
		[ "$(rotations)" -ge 3 ] && break
		sleep 0.5
	done
	rotations_before=$(rotations)
	LOST=$(on_duty_logger)
	AGAIN=$((${LOST:-1} - 1))
	if [ "${rotations_before:-0}" -ge 3 ] && [ -n "$LOST" ]; then
		pass "the RoLo-P duty rotated $rotations_before times before the failure (member $LOST on duty)"
	else
		fail "the RoLo-P duty rotated at least 3 times before the failure" "rotations $rotations_before, on duty: ${LOST:-unknown}"
	fi
	LOST=${LOST:-1}
fi
for m in $LOST; do grs fail-member r5 "$m" >>"$WORK/fail.log" 2>&1; done
degraded=$(volume_field '.volume.degraded')
read -r reads0 writes0 < <(member2_io)
sleep 6
read -r reads1 writes1 < <(member2_io)
for m in $LOST; do grs replace-member r5 "$m" >>"$WORK/replace.log" 2>&1; done
replaced=$(members_health "$LOST")
wait_pgbench_load
[ "$LAYOUT" = rolo-p ] && echo "# RoLo-P: $(rotations) rotations since the agent started"
if [ "$((reads1 - reads0))" -gt 0 ] && [ "$((writes1 - writes0))" -gt 0 ]; then
	pass "while degraded the volume served reads and writes ($((reads1 - reads0)) reads, $((writes1 - writes0)) writes on member 2)"
else
	fail "while degraded the volume served reads and writes" "member 2: reads $reads0 -> $reads1, writes $writes0 -> $writes1"
fi
if [ "$degraded" = true ] && ! echo "$replaced" | grep -qvE '^(rebuilding|in_sync)(,(rebuilding|in_sync))*$'; then
	pass "member(s) $LOST failed (volume degraded) and replaced under load"
else
	fail "member(s) $LOST failed (volume degraded) and replaced under load" "degraded=$degraded after replace: $replaced ($(cat "$WORK/fail.log" "$WORK/replace.log"))"
fi
check_pgbench_ran "the failure and the rebuild"

rebuilt=1
for m in $LOST; do why=$(wait_in_sync "$m") || rebuilt=0; done
if [ "$rebuilt" -eq 1 ] && [ "$(volume_field .volume.degraded)" = false ]; then
	pass "the replacement is rebuilt to in_sync"
else
	fail "the replacement is rebuilt to in_sync" "$why: $(grep -i rebuild "$WORK/agent.log" | tail -2)"
fi

verify "after the rebuild"

scrub=$(grs scrub r5 --check-only 2>&1)
if [ "$(echo "$scrub" | jq -r '.report.mismatched_chunks, .report.read_errors' 2>/dev/null | tr '\n' ' ')" = "0 0 " ]; then
	pass "scrub --check-only finds every stripe's redundancy right (RoLo-P: the mirrors equal, logged runs aside)"
else
	fail "scrub --check-only finds every stripe's redundancy right" "$scrub"
fi
if [ "$LAYOUT" = raid6 ] || [ "$LAYOUT" = rolo-p ]; then
	skip "the member images agree: every stripe's parity is the XOR of its data" "$LAYOUT has no XOR parity (scrub checked it)"
else
	parity_of_images
	case $? in
	0) pass "the member images agree: every stripe's parity is the XOR of its data" ;;
	2) skip "the member images agree: every stripe's parity is the XOR of its data" "a member has no stored boundary list (scrub checked it)" ;;
	*) fail "the member images agree: every stripe's parity is the XOR of its data" "some 1 MiB block's XOR is not zero" ;;
	esac
fi

# The rebuilt members now have to be right: with the AGAIN members gone, every chunk of them is
# reconstructed from the others, the rebuilt ones among them.
for m in $AGAIN; do grs fail-member r5 "$m" >/dev/null 2>&1; done
if [ "$(members_health "$AGAIN")" = "$(times failed, $(echo $AGAIN | wc -w))" ]; then
	verify "degraded again, member(s) $AGAIN failed"
else
	fail "member(s) $AGAIN can be failed after the rebuild" "$(members_health "$AGAIN")"
fi
check_no_pg_error
pg_ctl_do stop -m fast

# kill -9 of the agent under writers, ROUNDS times, with every member in sync: after each
# restart the write-intent bitmap's resync must leave every stripe's parity right (a write in
# flight at the crash may have reached its data chunk and not its parity, or the reverse).
ROUNDS=${ROUNDS:-6}
for m in $AGAIN; do grs replace-member r5 "$m" >/dev/null 2>&1; done
for m in $AGAIN; do
	wait_in_sync "$m" >/dev/null || fail "member $m is rebuilt before the crash rounds" "$(members_health "$m")"
done
resync_done() {
	for _ in $(seq 1 240); do
		[ "$(volume_field '.volume.resync_pending_regions' 2>/dev/null)" = 0 ] && return 0
		sleep 0.25
	done
	return 1
}
bad_rounds=""
restarted=1
for round in $(seq 1 "$ROUNDS"); do
	start_crash_writers "$round" 1
	sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + (r % 150) / 100 }')"
	crash_agent_under_writers
	if ! start_mounted_agent; then
		restarted=0
		break
	fi
	mismatched=$(resync_done && grs scrub r5 --check-only 2>&1 | jq -r '.report.mismatched_chunks' 2>/dev/null)
	[ "$mismatched" = 0 ] || bad_rounds="$bad_rounds round $round: scrub: ${mismatched:-resync did not finish};"
	parity_of_images || bad_rounds="$bad_rounds round $round: the member images' XOR is not zero;"
done
resyncs=$(grep -c "unclean stop: resyncing" "$WORK/agent.log")
[ "$resyncs" -ge 1 ] || bad_rounds="$bad_rounds no crash left a region to resync (nothing was tested);"
if [ "$restarted" -eq 1 ]; then
	pass "the agent restarts after each of $ROUNDS kill -9 under concurrent writers"
else
	fail "the agent restarts after each kill -9" "$(tail -5 "$WORK/agent.log")"
fi
if [ "$restarted" -eq 1 ] && [ -z "$bad_rounds" ]; then
	pass "after every restart the resync leaves every stripe's parity right ($ROUNDS crashes, $resyncs with dirty regions; checked by scrub$(case "$LAYOUT" in raid5 | raid5-tracks) echo ' and from the images' ;; esac))"
else
	fail "after every restart the resync leaves every stripe's parity right" "$bad_rounds"
fi
if [ "$restarted" -eq 1 ]; then
	rm -f "$MNT"/busy* "$MNT/same"
	verify "after $ROUNDS crashes"
	pg_ctl_do stop -m fast
fi

kill -TERM "$AGENT_PID"
if wait "$AGENT_PID"; then
	pass "SIGTERM stops the agent cleanly"
else
	fail "SIGTERM stops the agent cleanly" "$(tail -3 "$WORK/agent.log")"
fi
AGENT_PID=""

echo "$PASSED passed, $FAILED failed$([ "$SKIPPED" -gt 0 ] && echo ", $SKIPPED skipped")"
[ "$FAILED" -eq 0 ]
