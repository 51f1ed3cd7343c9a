#!/usr/bin/env bash
# Root test of a shared flash pool (issue 16 item 1): two QMD volumes (one pair each) whose
# flash write buffer is one `[[flash]]` pool. With the second disks asleep, files written to
# both mounts are buffered in the pool's extents; the status lists the pool (no extent held
# twice, held + free = all); after kill -9 and a restart every file reads back with the
# page cache dropped; a volume left out of the configuration keeps its extents until
# `release_flash` frees them.
# One line per test ("ok - …" / "not ok - …: why"), then "N passed, M failed".
#
#   bash contrib-storage/tests/qmd-pool-root.sh               # as root
#   GRS_BIN=/path/to/greenreplica-storage bash …              # a given binary
set -uo pipefail

. "$(dirname "$0")/lib.sh"

require_root_and_tools "the flash pool tests" jq losetup mkfs.ext4 fusermount3 md5sum
build_agent

WORK=$(mktemp -d "/tmp/grs-qmd-pool.XXXXXX")
chmod 755 "$WORK"
AGENT_PID=""
SOCK=$WORK/run/control.sock
MNT_A=$WORK/mnt/a
MNT=$WORK/mnt/b # start_mounted_agent waits for $MNT
grs() { "$BIN" --socket "$SOCK" "$@"; }
status() { grs request '{"op":"status"}'; }
pool_field() { status | jq -r ".flash[0]$1"; }
volume_extents() { grs request "{\"op\":\"volume\",\"volume\":\"$1\"}" | jq -c '.volume.layout_state.flash_extents'; }

cleanup() {
	[ -n "$AGENT_PID" ] && terminate 10 "$AGENT_PID"
	unmount_below "$WORK"
	[ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK"/{members,state,run,mnt/a,mnt/b}
write_config() { # write_config VOLUMES...
	cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$SOCK"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"
CONF
	local v i
	for v in "$@"; do
		cat >>"$WORK/agent.toml" <<CONF
[[volume]]
name = "$v"
layout = "qmd"
flash = "fast"
policy = "utilization:epoch_s=0.5,sleep_epochs=2,wake_above=0.99,wake_epochs=100"
[volume.export]
mount_point = "$WORK/mnt/$v"
CONF
		for i in 0 1; do
			cat >>"$WORK/agent.toml" <<CONF
[[volume.member]]
kind = "file"
path = "$WORK/members/$v-$i.img"
size = "128MiB"
profile = "test-fast"
CONF
		done
	done
	cat >>"$WORK/agent.toml" <<CONF
[[flash]]
name = "fast"
kind = "file"
path = "$WORK/members/flash.img"
size = "80MiB"
extent_size = "4MiB"
CONF
}

write_config a b
if start_mounted_agent && findmnt -n "$MNT_A" >/dev/null && [ "$(pool_field .extents)" -gt 0 ]; then
	pass "two qmd volumes on one flash pool are served and mounted ($(pool_field .extents) extents of 4 MiB)"
else
	fail "two qmd volumes on one flash pool are served" "$(tail -5 "$WORK/agent.log")"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi

# The second disks sleep after two quiet epochs; then writes go to the active disk and
# the pool.
sleep 3
for v in a b; do
	for n in 1 2 3; do
		head -c $((2 << 20)) /dev/urandom >"$WORK/mnt/$v/f$n"
	done
done
sync
md5_before=$(cd "$WORK/mnt" && md5sum a/f* b/f*)
held_a=$(pool_field '.volumes[] | select(.volume == "a") | .extents')
held_b=$(pool_field '.volumes[] | select(.volume == "b") | .extents')
if [ "${held_a:-0}" -gt 0 ] && [ "${held_b:-0}" -gt 0 ]; then
	pass "both volumes buffer in the pool (a holds $held_a extents, b $held_b)"
else
	fail "both volumes buffer in the pool" "$(status | jq -c .flash)"
fi

pool_consistent() { # no extent listed by both volumes; the pool's counts add up
	local ea eb both sum
	ea=$(volume_extents a)
	eb=$(volume_extents b)
	both=$(jq -n --argjson a "$ea" --argjson b "$eb" '[$a[] as $x | $b[] | select(. == $x)] | length')
	sum=$(status | jq '.flash[0] | ([.volumes[].extents] | add) + .free_extents == .extents')
	[ "$both" = 0 ] && [ "$sum" = true ] &&
		[ "$(jq length <<<"$ea")" = "$(pool_field '.volumes[] | select(.volume == "a") | .extents')" ] &&
		[ "$(jq length <<<"$eb")" = "$(pool_field '.volumes[] | select(.volume == "b") | .extents')" ]
}
if pool_consistent; then
	pass "no extent is listed by both volumes; held + free = all, each as the pool says"
else
	fail "the pool and the volumes agree" "a $(volume_extents a) b $(volume_extents b) $(status | jq -c .flash)"
fi

kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
if start_mounted_agent && findmnt -n "$MNT_A" >/dev/null; then
	sync
	echo 3 >/proc/sys/vm/drop_caches
	md5_after=$(cd "$WORK/mnt" && md5sum a/f* b/f*)
	if [ "$md5_after" = "$md5_before" ]; then
		pass "after kill -9 and a restart every file on both volumes reads back (page cache dropped)"
	else
		fail "files read back after kill -9" "$(diff <(echo "$md5_before") <(echo "$md5_after"))"
	fi
	if pool_consistent; then
		pass "after the restart the pool and the volumes still agree"
	else
		fail "the pool and the volumes agree after the restart" "$(status | jq -c .flash)"
	fi
else
	fail "the agent restarts after kill -9" "$(tail -5 "$WORK/agent.log")"
fi

# b leaves the configuration: its extents stay until the operator releases them. The
# restart woke every disk for a moment (the write-back may have emptied b's buffer): b's
# second disk asleep again, a new file in b is buffered in the pool, and that is what b
# holds when it leaves.
sleep 3
head -c $((2 << 20)) /dev/urandom >"$WORK/mnt/b/f4"
sync
held_b=$(pool_field '.volumes[] | select(.volume == "b") | .extents')
terminate 20 "$AGENT_PID"
AGENT_PID=""
unmount_below "$WORK/mnt"
write_config a
MNT=$MNT_A
if start_mounted_agent; then
	b_left=$(pool_field '.volumes[] | select(.volume == "b") | "\(.extents) \(.assembled)"')
	b_extents=${b_left% *}
	if [ "${b_left#* }" = false ] && [ "${b_extents:-0}" -gt 0 ] && [ "$b_extents" = "$held_b" ]; then
		pass "a volume left out of the configuration keeps its $b_extents extents (not assembled)"
	else
		fail "a volume left out keeps its extents" "held $held_b on leaving; $(status | jq -c .flash)"
	fi
	free_before=$(pool_field .free_extents)
	reply=$(grs request '{"op":"release_flash","flash":"fast","volume":"b"}')
	refused=$(grs request '{"op":"release_flash","flash":"fast","volume":"a"}' 2>/dev/null | jq -r .ok)
	if [ "$(jq -r .ok <<<"$reply")" = true ] &&
		[ "$(pool_field .free_extents)" -eq $((free_before + b_extents)) ] &&
		[ -z "$(pool_field '.volumes[] | select(.volume == "b") | .volume')" ] && [ "$refused" = false ]; then
		pass "release_flash frees b's extents and slot; refused for the assembled volume a"
	else
		fail "release_flash" "$reply / a: $refused / $(status | jq -c .flash)"
	fi
	sync
	echo 3 >/proc/sys/vm/drop_caches
	md5_a=$(cd "$WORK/mnt" && md5sum a/f*)
	if [ "$md5_a" = "$(grep ' a/' <<<"$md5_before")" ]; then
		pass "volume a's files are intact"
	else
		fail "volume a's files are intact" "$md5_a"
	fi
else
	fail "the agent starts without volume b" "$(tail -5 "$WORK/agent.log")"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
