#!/usr/bin/env bash
# Root integration tests of the storage agent: a real daemon, FUSE, loop devices, ext4, fio.
# One line per test ("ok - …" / "not ok - …: why"), then "N passed, M failed".
# Exits non-zero if anything failed. Everything it creates lives under one temporary
# directory and is removed (daemons, mounts, loop devices, files) on every exit path.
#
#   bash contrib-storage/tests/run-root-integration.sh        # as root
#   GRS_BIN=/path/to/greenreplica-storage bash …               # test a given binary
set -uo pipefail

. "$(dirname "$0")/lib.sh"
check() { # check NAME COMMAND... : pass if the command succeeds
	local name=$1
	shift
	if "$@"; then pass "$name"; else fail "$name" "command failed: $*"; fi
}

require_root_and_tools "the root integration tests" fio jq losetup mkfs.ext4 e2fsck runuser fusermount3 cmp
build_agent

WORK=$(mktemp -d /tmp/grs-it.XXXXXX)
chmod 755 "$WORK"
AGENT_PID=""
ALL_PIDS=()

cleanup() {
	terminate 10 "${ALL_PIDS[@]}"
	# Whatever is still mounted below WORK (deepest first), then loops on WORK's files.
	unmount_below "$WORK"
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SOCK=$WORK/run/control.sock
MNT=$WORK/mnt/mirror
HDD=$WORK/mnt/hdd
METRICS_PORT=$((20000 + RANDOM % 20000))
mkdir -p "$WORK"/{members,state,run,mnt/mirror,mnt/hdd,dyn}

cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$SOCK"
group = "nogroup"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"
metrics_listen = "127.0.0.1:$METRICS_PORT"
volume_directories = ["$WORK/dyn"]

[[volume]]
name = "mirror"
layout = "raid10"
stripe_unit = 65536
policy = "always-on"
rebuild_mb_s = 400
trace = "$WORK/mirror-trace.csv"
[volume.export]
mount_point = "$MNT"
owner = "nobody"
[[volume.member]]
kind = "file"
path = "$WORK/members/mirror-0.img"
size = "96MiB"
profile = "test-fast"
[[volume.member]]
kind = "file"
path = "$WORK/members/mirror-1.img"
size = "96MiB"
profile = "test-fast"

[[volume]]
name = "hdd"
layout = "single"
policy = "cooperative:60"
[volume.export]
mount_point = "$HDD"
[[volume.member]]
kind = "emulated-hdd"
path = "$WORK/members/hdd-0.img"
size = "32MiB"
profile = "test-fast"

[[template]]
name = "scratch"
layout = "single"
members = 1
member_kind = "file"
member_size = "32MiB"
profile = "test-fast"
CONF

grs() { "$BIN" --socket "$SOCK" "$@"; }
field() { grs request "$1" --pointer "$2"; }

start_agent() { # start_agent CONFIG LOG: returns once the socket answers
	"$BIN" serve --config "$1" >>"$2" 2>&1 &
	AGENT_PID=$!
	ALL_PIDS+=("$AGENT_PID")
	for _ in $(seq 1 120); do
		kill -0 "$AGENT_PID" 2>/dev/null || return 1
		if grs volumes >/dev/null 2>&1 && [ "$(field '{"op":"volumes"}' /volumes | jq length)" -ge 2 ]; then
			return 0
		fi
		sleep 0.25
	done
	return 1
}

stop_agent() { # SIGTERM; succeeds if the agent exits 0
	kill -TERM "$AGENT_PID" 2>/dev/null || return 1
	wait "$AGENT_PID"
}

nothing_left() { # no mounts below WORK/mnt or WORK/run, no loop on WORK files
	! awk -v w="$WORK" 'index($5, w) == 1' /proc/self/mountinfo | grep -q . &&
		! losetup -a | grep -qF "$WORK"
}

FIO_COMMON=(--ioengine=psync --bs=16k --verify=crc32c --randseed=7 --group_reporting --minimal)
fio_as_nobody() { runuser -u nobody -- fio "${FIO_COMMON[@]}" "$@" >>"$WORK/fio.log" 2>&1; }

# --- configuration errors -----------------------------------------------------------------
sed 's/size = "32MiB"/size = "lots"/' "$WORK/agent.toml" >"$WORK/bad.toml"
if "$BIN" serve --config "$WORK/bad.toml" >"$WORK/bad.log" 2>&1; then
	fail "a bad configuration is refused" "serve started"
elif grep -q 'volume\[1\].member\[0\].size' "$WORK/bad.log"; then
	pass "a bad configuration is refused with the key named"
else
	fail "a bad configuration is refused with the key named" "$(tail -1 "$WORK/bad.log")"
fi

# --- a non-empty unknown member is never formatted ----------------------------------------
mkdir -p "$WORK/foreign/mnt"
head -c 4194304 /dev/urandom >"$WORK/foreign/m.img"
truncate -s 16M "$WORK/foreign/m.img"
sum_before=$(md5sum <"$WORK/foreign/m.img")
cat >"$WORK/foreign.toml" <<CONF
[agent]
socket = "$WORK/foreign/control.sock"
state_dir = "$WORK/foreign"
runtime_dir = "$WORK/foreign"
[[volume]]
name = "foreign"
layout = "single"
[volume.export]
mount_point = "$WORK/foreign/mnt"
[[volume.member]]
kind = "file"
path = "$WORK/foreign/m.img"
size = "16MiB"
profile = "test-fast"
CONF
if "$BIN" serve --config "$WORK/foreign.toml" >"$WORK/foreign.log" 2>&1; then
	fail "a non-empty unknown member is refused" "serve started"
elif grep -q "not empty" "$WORK/foreign.log" && [ "$(md5sum <"$WORK/foreign/m.img")" = "$sum_before" ]; then
	pass "a non-empty unknown member is refused and left untouched"
else
	fail "a non-empty unknown member is refused and left untouched" "$(tail -1 "$WORK/foreign.log")"
fi

# --- serve, mount, write and verify ---------------------------------------------------------
if ! start_agent "$WORK/agent.toml" "$WORK/agent.log"; then
	fail "the agent starts and mounts its volumes" "$(tail -5 "$WORK/agent.log")"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi
pass "the agent starts and mounts its volumes"

if [ "$(stat -c %U "$MNT")" = nobody ] && findmnt -n -o FSTYPE "$MNT" | grep -qx ext4; then
	pass "the volume is ext4, mounted, owned by the configured user"
else
	fail "the volume is ext4, mounted, owned by the configured user" "$(findmnt "$MNT"; stat -c %U "$MNT")"
fi

mount_options=$(findmnt -no VFS-OPTIONS "$MNT")
check "the volume is mounted noatime, nosuid, nodev ($mount_options)" \
	sh -c "echo '$mount_options' | tr , '\\n' | grep -cxE 'noatime|nosuid|nodev' | grep -qx 3"
check "fio writes and verifies 32 MiB through the RAID10 volume" \
	fio_as_nobody --name=data --filename="$MNT/data.fio" --size=32M --rw=randwrite --do_verify=1 --fsync_on_close=1
runuser -u nobody -- sh -c "head -c 5000000 /dev/urandom > '$MNT/blob' && sync '$MNT/blob'"
blob_sum=$(md5sum <"$MNT/blob")

check "metrics over the socket report energy per volume and member" \
	sh -c "'$BIN' --socket '$SOCK' metrics | grep -q 'greenreplica_storage_energy_joules_total{volume=\"mirror\",member=\"1\"}'"
check "metrics over the loopback listener" \
	bash -c "exec 3<>/dev/tcp/127.0.0.1/$METRICS_PORT && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && grep -q greenreplica_storage_spin_ups_total <&3"

# --- control socket -------------------------------------------------------------------------
replies=$(printf '%s\n' '{not json' '{"op":"explode"}' '{"op":"wake"}' '[]' '{"op":"status"}' | grs pipe)
if [ "$(echo "$replies" | wc -l)" -eq 5 ] &&
	echo "$replies" | sed -n 1p | is '.ok == false and (.error | startswith("malformed"))' &&
	echo "$replies" | sed -n 2p | is '.ok == false and (.error | startswith("unknown op"))' &&
	echo "$replies" | sed -n 3p | is '.ok == false and (.error | contains("bad arguments"))' &&
	echo "$replies" | sed -n 4p | is '.ok == false' &&
	echo "$replies" | sed -n 5p | is '.ok == true and (.volumes | length) == 2'; then
	pass "malformed lines, unknown ops and bad arguments get error replies; the connection keeps serving"
else
	fail "malformed lines, unknown ops and bad arguments get error replies" "$replies"
fi

check "a member of the configured group may use the socket" \
	sh -c "runuser -u nobody -- '$BIN' --socket '$SOCK' volumes >/dev/null"
if runuser -u daemon -- "$BIN" --socket "$SOCK" volumes >/dev/null 2>&1; then
	fail "a user outside the group cannot connect" "connected"
else
	pass "a user outside the group cannot connect (socket mode 0660)"
fi
chmod 0666 "$SOCK"
out=$(runuser -u daemon -- "$BIN" --socket "$SOCK" volumes 2>&1)
chmod 0660 "$SOCK"
if echo "$out" | grep -q "permission denied"; then
	pass "peer credentials refuse a user outside the group even with an open socket file"
else
	fail "peer credentials refuse a user outside the group" "$out"
fi

# --- power: cooperative sleep and wake on an emulated drive ---------------------------------
declined=$(grs request '{"op":"sleep","volume":"hdd","expected_idle_s":1}')
if echo "$declined" | is '.ok == false and .declined == true and (.reason | contains("break-even"))'; then
	pass "a sleep shorter than the break-even time is declined with the reason"
else
	fail "a sleep shorter than the break-even time is declined" "$declined"
fi
sync
state=$(field '{"op":"sleep","volume":"hdd","expected_idle_s":600}' /state)
for _ in $(seq 1 40); do
	state=$(field '{"op":"volume","volume":"hdd"}' /volume/state)
	[ "$state" = standby ] && break
	sleep 0.25
done
if [ "$state" = standby ]; then pass "an accepted sleep reaches standby"; else fail "an accepted sleep reaches standby" "state $state"; fi
wake=$(grs request '{"op":"wake","volume":"hdd"}')
# A late filesystem write (a journal commit) may reach the drive first and start the spin-up
# itself: the drive is then "active" serving it, and still not ready for a while.
if echo "$wake" | is '.ok and (.state == "spinning_up" or .state == "active") and .ready_in_s > 0'; then
	pass "wake reports spinning_up and the time until ready"
else
	fail "wake reports spinning_up and the time until ready" "$wake"
fi
cause=$(field '{"op":"volume","volume":"hdd"}' /volume/members/0/awake/cause)
# As above, a late write may have started the spin-up first ("io").
if [ "$cause" = request ] || [ "$cause" = io ]; then
	pass "the status says why the member is awake"
else
	fail "the status says why the member is awake" "cause $cause"
fi
bad_wake=$(grs request '{"op":"wake","volume":"hdd","extents":[[18446744073709551615,2]]}')
many=$(jq -cn '{op: "hint", volume: "hdd", extents: [range(16385) | [0, 1]]}')
bad_hint=$(grs request "$many")
if echo "$bad_wake" | is '.ok == false and (.error | contains("beyond the volume size"))' &&
	echo "$bad_hint" | is '.ok == false and (.error | contains("at most 16384"))'; then
	pass "hinted extents beyond the volume or too many are refused with the reason"
else
	fail "hinted extents beyond the volume or too many are refused" "$bad_wake $bad_hint"
fi
ledger=$(field '{"op":"volume","volume":"hdd"}' /volume/ledger)
if echo "$ledger" | is '.spin_downs >= 1 and .spin_ups >= 1 and .state_seconds.standby > 0 and .state_joules.spinning_up > 0'; then
	pass "the ledger books the spin-down, standby and spin-up"
else
	fail "the ledger books the spin-down, standby and spin-up" "$ledger"
fi

# --- restart keeps data and ledger ---------------------------------------------------------
energy_before=$(field '{"op":"volume","volume":"mirror"}' /volume/energy_joules)
capacity=$(field '{"op":"volume","volume":"mirror"}' /volume/capacity_bytes)
if stop_agent && nothing_left; then
	pass "SIGTERM unmounts, detaches and exits 0"
else
	fail "SIGTERM unmounts, detaches and exits 0" "$(tail -3 "$WORK/agent.log"; losetup -a)"
fi
start_agent "$WORK/agent.toml" "$WORK/agent.log" || fail "restart" "$(tail -5 "$WORK/agent.log")"
check "after restart fio verifies every block" \
	fio_as_nobody --name=data --filename="$MNT/data.fio" --size=32M --rw=randwrite --verify_only=1
check "after restart the file checksum matches" test "$(md5sum <"$MNT/blob")" = "$blob_sum"
energy_after=$(field '{"op":"volume","volume":"mirror"}' /volume/energy_joules)
check "the energy ledger continues across the restart" \
	sh -c "jq -en --argjson a '$energy_before' --argjson b '$energy_after' '\$b >= \$a and \$a > 0' >/dev/null"

# --- RAID10: fail a member during writes, replace, rebuild ---------------------------------
fio_as_nobody --name=degraded --filename="$MNT/degraded.fio" --size=40M --rw=write --do_verify=1 --fsync_on_close=1 --rate=20m &
writer=$!
sleep 0.7
grs fail-member mirror 1 >/dev/null
if wait "$writer"; then
	pass "a member failing during writes causes no error for the writer"
else
	fail "a member failing during writes causes no error for the writer" "$(tail -3 "$WORK/fio.log")"
fi
check "the volume reports itself degraded with member 1 failed" \
	prints '.volume.degraded and .volume.members[1].health.health == "failed"' \
		grs request '{"op":"volume","volume":"mirror"}'
grs replace-member mirror 1 >/dev/null
health=""
for _ in $(seq 1 240); do
	health=$(field '{"op":"volume","volume":"mirror"}' /volume/members/1/health/health)
	[ "$health" = in_sync ] && break
	sleep 0.25
done
check "the replacement is rebuilt to in_sync" test "$health" = in_sync
check "data written while degraded verifies after the rebuild" \
	fio_as_nobody --name=degraded --filename="$MNT/degraded.fio" --size=40M --rw=write --verify_only=1

# --- kill -9 during fsync'd writes ----------------------------------------------------------
mkdir -p "$MNT/crash"
: >"$WORK/acked"
(
	i=0
	while [ $i -lt 100000 ]; do
		i=$((i + 1))
		dd if=/dev/urandom of="$MNT/crash/f$i" bs=65536 count=1 conv=fsync status=none 2>/dev/null || break
		sync "$MNT/crash" 2>/dev/null || break
		echo "f$i $(md5sum <"$MNT/crash/f$i" | cut -d' ' -f1)" >>"$WORK/acked"
	done
) &
crash_writer=$!
sleep 1.5
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
for _ in $(seq 1 120); do kill -0 "$crash_writer" 2>/dev/null || break; sleep 0.25; done
kill -KILL "$crash_writer" 2>/dev/null
wait "$crash_writer" 2>/dev/null
acked=$(wc -l <"$WORK/acked")
if start_agent "$WORK/agent.toml" "$WORK/agent.log"; then
	pass "the agent restarts after kill -9 (stale mounts cleaned, fsck run)"
else
	fail "the agent restarts after kill -9" "$(tail -5 "$WORK/agent.log")"
fi
lost=0
while read -r name sum; do
	[ "$(md5sum <"$MNT/crash/$name" 2>/dev/null | cut -d' ' -f1)" = "$sum" ] || lost=$((lost + 1))
done <"$WORK/acked"
if [ "$acked" -gt 0 ] && [ "$lost" -eq 0 ]; then
	pass "every fsync-acknowledged write survived kill -9 ($acked files)"
else
	fail "every fsync-acknowledged write survived kill -9" "$lost of $acked lost"
fi
check "the volume still verifies after kill -9" \
	fio_as_nobody --name=data --filename="$MNT/data.fio" --size=32M --rw=randwrite --verify_only=1

# --- unprivileged callers create and remove volumes -----------------------------------------
install -d -o nobody -m 0755 "$WORK/dyn/scratch1"
created=$(runuser -u nobody -- "$BIN" --socket "$SOCK" request \
	"{\"op\":\"create_volume\",\"name\":\"scratch1\",\"template\":\"scratch\",\"directory\":\"$WORK/dyn/scratch1\"}" 2>&1)
if echo "$created" | is '.ok' && runuser -u nobody -- touch "$WORK/dyn/scratch1/hello" &&
	[ "$(stat -c %U "$WORK/dyn/scratch1")" = nobody ]; then
	pass "an unprivileged caller creates a volume mounted and owned by it"
else
	fail "an unprivileged caller creates a volume" "$created"
fi
install -d -o nobody "$WORK/elsewhere"
out=$(runuser -u nobody -- "$BIN" --socket "$SOCK" request \
	"{\"op\":\"create_volume\",\"name\":\"x\",\"template\":\"scratch\",\"directory\":\"$WORK/elsewhere\"}" 2>&1)
if echo "$out" | grep -q "volume_directories"; then
	pass "create_volume outside the configured directories is refused"
else
	fail "create_volume outside the configured directories is refused" "$out"
fi
removed=$(runuser -u nobody -- "$BIN" --socket "$SOCK" request '{"op":"remove_volume","name":"scratch1"}' 2>&1)
if echo "$removed" | is '.ok' && ! findmnt "$WORK/dyn/scratch1" >/dev/null; then
	pass "the caller removes its volume and the mount goes away"
else
	fail "the caller removes its volume" "$removed"
fi

# A detached loop device keeps its backing file (the FUSE image) open until its last opener
# closes it (udev's blkid after the ext4 unmount, say): removal waits for that instead of
# failing with "FUSE unmount: Device or resource busy".
install -d -o nobody -m 0755 "$WORK/dyn/scratch2"
created=$(runuser -u nobody -- "$BIN" --socket "$SOCK" request \
	"{\"op\":\"create_volume\",\"name\":\"scratch2\",\"template\":\"scratch\",\"directory\":\"$WORK/dyn/scratch2\"}" 2>&1)
loopdev=$(findmnt -n -o SOURCE "$WORK/dyn/scratch2" 2>/dev/null)
if [ -n "$loopdev" ]; then
	sleep 3 <"$loopdev" &
	holder=$!
	removed=$(runuser -u nobody -- "$BIN" --socket "$SOCK" request '{"op":"remove_volume","name":"scratch2"}' 2>&1)
	wait "$holder"
	if echo "$removed" | is '.ok' && ! findmnt "$WORK/dyn/scratch2" >/dev/null &&
		! losetup -a | grep -qF "$WORK/run/scratch2"; then
		pass "a volume whose loop device is still held open is removed once it is released"
	else
		fail "a volume whose loop device is still held open is removed" "$removed"
	fi
else
	fail "a volume whose loop device is still held open is removed" "no mount: $created"
fi

# --- I/O trace recording and replay ---------------------------------------------------------
check "served I/O is recorded as an MSR trace that replays" \
	prints '.requests > 0' \
		"$BIN" replay --trace "$WORK/mirror-trace.csv" --disk 0 --profile test-fast --policy always-on --layout raid10

# --- clean stop: filesystem clean, both copies identical ------------------------------------
if stop_agent && nothing_left; then
	pass "the final SIGTERM leaves no mounts, loop devices or daemons"
else
	fail "the final SIGTERM leaves no mounts, loop devices or daemons" "$(losetup -a)"
fi
fsck_ok=1
for m in 0 1; do
	dev=$(losetup --find --show --read-only --offset 1048576 --sizelimit "$capacity" "$WORK/members/mirror-$m.img")
	e2fsck -fn "$dev" >>"$WORK/fsck.log" 2>&1 || fsck_ok=0
	losetup -d "$dev"
done
check "e2fsck -fn finds both mirror copies clean" test "$fsck_ok" -eq 1
check "both mirror copies hold identical data" \
	cmp -s -i 1048576 "$WORK/members/mirror-0.img" "$WORK/members/mirror-1.img"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
