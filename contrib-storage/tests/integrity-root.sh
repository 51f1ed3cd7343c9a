#!/usr/bin/env bash
# Root integrity tests of the storage agent's RAID10 (issue 11, items 4 and 5): kill -9 of
# the agent at random moments under concurrent writers, 20 times; after every restart the
# write-intent bitmap's resync must leave both mirrors identical, and data written before the
# crashes must still verify. One line per test ("ok - …" / "not ok - …: why"), then
# "N passed, M failed". Everything lives under one temporary directory, removed on exit.
#
#   bash contrib-storage/tests/integrity-root.sh              # as root
#   GRS_BIN=/path/to/greenreplica-storage ROUNDS=5 bash …     # another binary, fewer crashes
set -uo pipefail

. "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-20}

require_root_and_tools "the integrity tests" fio jq losetup mkfs.ext4 e2fsck fsfreeze filefrag fusermount3 cmp
build_agent

WORK=$(mktemp -d /tmp/grs-integrity.XXXXXX)
chmod 755 "$WORK"
AGENT_PID=""
WRITERS=()

cleanup() {
	local pid
	for pid in "${WRITERS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
	[ -n "$AGENT_PID" ] && terminate 10 "$AGENT_PID"
	fsfreeze -u "$MNT" 2>/dev/null
	unmount_below "$WORK"
	[ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SOCK=$WORK/run/control.sock
MNT=$WORK/mnt/int
M0=$WORK/members/int-0.img
M1=$WORK/members/int-1.img
mkdir -p "$WORK"/{members,state,run,mnt/int}
cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$SOCK"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"

[[volume]]
name = "int"
layout = "raid10"
stripe_unit = 65536
policy = "always-on"
[volume.export]
mount_point = "$MNT"
[[volume.member]]
kind = "file"
path = "$M0"
size = "96MiB"
profile = "test-fast"
[[volume.member]]
kind = "file"
path = "$M1"
size = "96MiB"
profile = "test-fast"
CONF

grs() { "$BIN" --socket "$SOCK" "$@"; }

resync_done() { # waits until the agent reports no region left to resync
	local pending
	for _ in $(seq 1 240); do
		pending=$(grs request '{"op":"volume","volume":"int"}' 2>/dev/null | jq -r '.volume.resync_pending_regions')
		[ "$pending" = "0" ] && return 0
		sleep 0.25
	done
	return 1
}

mirrors_identical() { # with the filesystem frozen (nothing in flight), compare past the header
	local same=1
	fsfreeze -f "$MNT" || return 1
	cmp -s -i 1048576 "$M0" "$M1" || same=0
	[ "$same" -eq 1 ] || cmp -i 1048576 "$M0" "$M1" 2>&1 | head -1 >>"$WORK/diverged"
	fsfreeze -u "$MNT"
	[ "$same" -eq 1 ]
}

# restart_with_read_errors START COUNT: restart the agent with COUNT consecutive 4 KiB blocks
# from member offset START unreadable, even blocks on member 0 and odd ones on member 1 (so
# whichever copy serves a read there meets a bad block); the config file is left as it was.
restart_with_read_errors() {
	local start=$1 count=$2 i r ranges0="" ranges1=""
	for i in $(seq 0 $((count - 1))); do
		r="[$((start + i * 4096)), 4096]"
		if [ $((i % 2)) -eq 0 ]; then ranges0="$ranges0${ranges0:+, }$r"; else ranges1="$ranges1${ranges1:+, }$r"; fi
	done
	awk -v r0="$ranges0" -v r1="$ranges1" '
		{ print }
		/^path = .*int-0.img"$/ { print "inject_read_errors = [" r0 "]" }
		/^path = .*int-1.img"$/ { print "inject_read_errors = [" r1 "]" }' "$WORK/agent.toml" >"$WORK/faulty.toml"
	kill -TERM "$AGENT_PID"
	wait "$AGENT_PID"
	cp "$WORK/agent.toml" "$WORK/agent.toml.orig"
	cp "$WORK/faulty.toml" "$WORK/agent.toml"
	start_mounted_agent || fail "the agent starts with injected read errors" "$(tail -3 "$WORK/agent.log")"
	cp "$WORK/agent.toml.orig" "$WORK/agent.toml"
}

FIO_COMMON=(--ioengine=psync --bs=16k --verify=crc32c --verify_state_save=0 --randseed=11 --group_reporting --minimal)

if ! start_mounted_agent; then
	fail "the agent starts" "$(tail -5 "$WORK/agent.log")"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi
# Data written once, before any crash: it must verify after all of them.
if fio "${FIO_COMMON[@]}" --name=kept --filename="$MNT/kept.fio" --size=16M --rw=randwrite \
	--do_verify=1 --fsync_on_close=1 >>"$WORK/fio.log" 2>&1; then
	pass "fio writes and verifies the data kept across the crashes"
else
	fail "fio writes and verifies the data kept across the crashes" "$(tail -3 "$WORK/fio.log")"
fi

diverged_rounds=0
restart_failures=0
for round in $(seq 1 "$ROUNDS"); do
	# Two buffered random writers and two direct writers hammering the same blocks of one file.
	start_crash_writers "$round" 2
	sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.3 + (r % 170) / 100 }')"
	crash_agent_under_writers
	if ! start_mounted_agent; then
		restart_failures=$((restart_failures + 1))
		echo "round $round: restart failed" >>"$WORK/diverged"
		break
	fi
	if ! resync_done || ! mirrors_identical; then
		diverged_rounds=$((diverged_rounds + 1))
		echo "round $round: mirrors differ after the restart" >>"$WORK/diverged"
	fi
done

if [ "$restart_failures" -eq 0 ]; then
	pass "the agent restarts after each of $ROUNDS kill -9 under concurrent writers"
else
	fail "the agent restarts after each kill -9" "$(tail -5 "$WORK/agent.log")"
fi
if [ "$diverged_rounds" -eq 0 ] && [ "$restart_failures" -eq 0 ]; then
	pass "after every restart both mirrors are identical past the header ($ROUNDS crashes)"
else
	fail "after every restart both mirrors are identical past the header" \
		"$diverged_rounds of $ROUNDS rounds diverged: $(head -3 "$WORK/diverged" | tr '\n' ' ')"
fi
if fio "${FIO_COMMON[@]}" --name=kept --filename="$MNT/kept.fio" --size=16M --rw=randwrite \
	--verify_only=1 >>"$WORK/fio.log" 2>&1; then
	pass "fio verifies the data written before the crashes"
else
	fail "fio verifies the data written before the crashes" "$(tail -3 "$WORK/fio.log")"
fi

# Silent corruption of one copy: scrub --check-only reports it, scrub repairs it.
fsfreeze -f "$MNT"
printf 'corrupted-by-the-test' | dd of="$M1" bs=1 seek=$((1048576 + 40 * 1048576 + 123)) conv=notrunc status=none
fsfreeze -u "$MNT"
checked=$(grs scrub int --check-only 2>&1)
if [ "$(echo "$checked" | jq -r '.report.mismatched_chunks' 2>/dev/null)" = "1" ] &&
	[ "$(echo "$checked" | jq -r '.report.repaired_chunks')" = "0" ]; then
	pass "scrub --check-only reports the one corrupted chunk and leaves it"
else
	fail "scrub --check-only reports the one corrupted chunk and leaves it" "$checked"
fi
repaired=$(grs scrub int 2>&1)
if [ "$(echo "$repaired" | jq -r '.report.repaired_chunks' 2>/dev/null)" = "1" ] && mirrors_identical; then
	pass "scrub repairs it from the first copy: both mirrors identical again"
else
	fail "scrub repairs it from the first copy" "$repaired"
fi

# Latent sector errors (injected with the members' inject_read_errors): in one 64 KiB
# stripe unit of kept.fio, every even 4 KiB block fails to read on member 0 and every odd one
# on member 1, so whichever copy serves a read there hits a bad block. Reads must be served
# from the other copy and the bad blocks rewritten; fio must see no error.
ext=$(filefrag -e "$MNT/kept.fio" 2>/dev/null)
fs_block=$(echo "$ext" | sed -n 's/.*blocks of \([0-9]*\) bytes.*/\1/p' | head -1)
read -r first_block extent_blocks < <(echo "$ext" | awk '$1 == "0:" { gsub(/[.:]/, " "); print $4, $6 }')
bad_start=$(((first_block * fs_block / 65536 + 1) * 65536))
if [ -z "$fs_block" ] || [ -z "$first_block" ] ||
	[ $((first_block * fs_block + extent_blocks * fs_block)) -lt $((bad_start + 65536)) ]; then
	fail "injected read errors are corrected from the mirror" "cannot place them: $(echo "$ext" | head -4 | tr '\n' ' ')"
else
	restart_with_read_errors "$bad_start" 16
	if fio "${FIO_COMMON[@]}" --name=kept --filename="$MNT/kept.fio" --size=16M --rw=randwrite \
		--verify_only=1 >>"$WORK/fio.log" 2>&1; then
		pass "fio verifies every block although reads of one copy fail (served from the mirror)"
	else
		fail "fio verifies every block although reads of one copy fail" "$(tail -3 "$WORK/fio.log")"
	fi
	vol=$(grs request '{"op":"volume","volume":"int"}')
	errors=$(echo "$vol" | jq '[.volume.members[].read_errors] | add')
	healths=$(echo "$vol" | jq -r '[.volume.members[].health.health] | join(",")')
	if [ "${errors:-0}" -ge 1 ] && [ "$healths" = "in_sync,in_sync" ]; then
		pass "the read errors were counted ($errors) and corrected; both members stay in sync"
	else
		fail "the read errors were counted and corrected; both members stay in sync" "read_errors $errors, health $healths"
	fi
	grs scrub int >/dev/null 2>&1
	rescan=$(grs scrub int --check-only 2>&1)
	if [ "$(echo "$rescan" | jq -r '.report.mismatched_chunks, .report.read_errors' 2>/dev/null | tr '\n' ' ')" = "0 0 " ] &&
		mirrors_identical; then
		pass "after a scrub every bad block is rewritten: no read error, copies identical"
	else
		fail "after a scrub every bad block is rewritten" "$rescan"
	fi
fi

# PostgreSQL on the volume reads through latent sector errors without seeing one: a cluster
# with data checksums whose table file has bad 4 KiB blocks on alternate members (as above;
# an 8 KiB page then spans a bad block on each member)
# returns the same rows after the agent restarts with those faults, and the agent counts them.
PG_BIN=/usr/lib/postgresql/15/bin
if [ -x "$PG_BIN/initdb" ]; then
	PGDATA_DIR=$MNT/pgdata
	PGSOCK=$WORK/pgsock
	PGPORT=$((20000 + RANDOM % 20000))
	rm -f "$MNT"/busy*  # the crash rounds' scratch files: room for a cluster
	chmod 755 "$WORK" "$WORK/mnt" "$MNT"
	install -d -o nobody -m 0700 "$PGDATA_DIR"
	install -d -o nobody -m 0755 "$PGSOCK"
	as_pg() { (cd / && runuser -u nobody -- "$@"); }
	pg_sql() { as_pg "$PG_BIN/psql" -X -A -t -h "$PGSOCK" -p "$PGPORT" -d postgres -c "$1"; }
	pg_ctl_do() { as_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$PGSOCK/pg.log" -w -o "-p $PGPORT -k $PGSOCK -c listen_addresses=''" "$@" >/dev/null; }
	as_pg "$PG_BIN/initdb" -D "$PGDATA_DIR" -k -A trust --no-sync >"$WORK/initdb.log" 2>&1
	pg_ctl_do start
	pg_sql "CREATE TABLE t AS SELECT i, repeat(md5(i::text), 30) AS filler FROM generate_series(1, 4000) i" >/dev/null
	pg_sql "CHECKPOINT" >/dev/null
	want=$(pg_sql "SELECT sum(hashtext(filler) + i) FROM t")
	relfile=$PGDATA_DIR/$(pg_sql "SELECT pg_relation_filepath('t')")
	pg_ctl_do stop -m fast
	sync
	ext=$(filefrag -e "$relfile" 2>/dev/null)
	fs_block=$(echo "$ext" | sed -n 's/.*blocks of \([0-9]*\) bytes.*/\1/p' | head -1)
	read -r first_block extent_blocks < <(echo "$ext" | awk '$1 == "0:" { gsub(/[.:]/, " "); print $4, $6 }')
	bad_start=$(((first_block * fs_block / 4096 + 4) * 4096))
	if [ -z "$fs_block" ] || [ -z "$first_block" ] || [ "$((extent_blocks * fs_block))" -lt $((8 * 65536)) ]; then
		fail "PostgreSQL reads through latent sector errors" "cannot place them: $(echo "$ext" | head -4 | tr '\n' ' ')"
	else
		restart_with_read_errors "$bad_start" 8 # 4 per member: below the 20 that fail a member
		chmod 755 "$MNT" # the export sets the root's mode again at each mount
		pg_ctl_do start
		got=$(pg_sql "SELECT sum(hashtext(filler) + i) FROM t" 2>"$WORK/pg-read.err")
		pg_ctl_do stop -m fast
		errors=$(grs request '{"op":"volume","volume":"int"}' | jq '[.volume.members[].read_errors] | add')
		if [ -n "$want" ] && [ "$got" = "$want" ] && [ ! -s "$WORK/pg-read.err" ] &&
			! grep -qE 'ERROR|invalid page|checksum' "$PGSOCK/pg.log" && [ "${errors:-0}" -ge 1 ]; then
			pass "PostgreSQL reads its table through latent sector errors on both members: same rows, no error ($errors corrected)"
		else
			fail "PostgreSQL reads its table through latent sector errors" \
				"want $want got $got, read errors $errors: $(cat "$WORK/pg-read.err"; grep -E 'ERROR|invalid page|checksum' "$PGSOCK/pg.log" | head -2)"
		fi
	fi
else
	fail "PostgreSQL reads through latent sector errors" "no PostgreSQL 15 server at $PG_BIN (make deps installs it)"
fi

# A clean stop, then both copies are a clean ext4 and identical.
kill -TERM "$AGENT_PID"
if wait "$AGENT_PID"; then
	pass "SIGTERM stops the agent cleanly"
else
	fail "SIGTERM stops the agent cleanly" "$(tail -3 "$WORK/agent.log")"
fi
AGENT_PID=""
if cmp -s -i 1048576 "$M0" "$M1"; then
	pass "after the clean stop both mirror images are identical"
else
	fail "after the clean stop both mirror images are identical" "$(cmp -i 1048576 "$M0" "$M1" 2>&1 | head -1)"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
