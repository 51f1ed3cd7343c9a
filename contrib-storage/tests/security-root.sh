#!/usr/bin/env bash
# Root tests of what the control socket's group can and cannot make the agent (root) do,
# and of the daemon's hygiene: a real daemon, FUSE, loop devices, ext4.
#   - create_volume under a racing symlink swapper never mounts or chowns outside its tree;
#   - fail/replace_member: only the owner (or root), member files only below
#     agent.member_directories, /etc/shadow-style targets refused and left untouched;
#   - peer identity is the one recorded at connect time (SO_PEERCRED/SO_PEERGROUPS);
#   - connection bound, idle timeout, oversize lines answered and the connection kept;
#   - READY=1 (sd_notify) only once the volumes are mounted; IO_FLUSHER and mlockall;
#   - shutdown stops sleeping emulated volumes side by side, not one spin-up after another.
# One line per test ("ok - …" / "not ok - …: why"), then "N passed, M failed".
#
#   bash contrib-storage/tests/security-root.sh        # as root
#   GRS_BIN=/path/to/greenreplica-storage bash …        # test a given binary
set -uo pipefail

. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3 # the system one: the helpers also run as nobody and daemon
require_root_and_tools "the security root tests" jq losetup mkfs.ext4 runuser findmnt "$PY"
build_agent

WORK=$(mktemp -d /tmp/grs-sec.XXXXXX)
chmod 755 "$WORK"
AGENT_PID=""
ALL_PIDS=()

cleanup() {
	terminate 30 "${ALL_PIDS[@]}"
	unmount_below "$WORK"
	[ -n "${KEEP_WORK:-}" ] && { cp -r "$WORK"/*.log /tmp/grs-sec-logs/ 2>/dev/null; }
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SOCK=$WORK/run/control.sock
OWNED=$WORK/mnt/owned
mkdir -p "$WORK"/{members,member-dir,state,run,mnt/owned,dyn,etc,victim}
chmod 0755 "$WORK/victim"
printf 'root:$6$not-a-real-hash:19000:0:99999:7:::\n' >"$WORK/etc/shadow"
chmod 0640 "$WORK/etc/shadow"
shadow_sum() { md5sum <"$WORK/etc/shadow"; }
SHADOW_SUM=$(shadow_sum)

cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$SOCK"
group = "nogroup"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"
volume_directories = ["$WORK/dyn"]
member_directories = ["$WORK/member-dir"]
max_connections = 4
connection_idle_timeout_s = 2

[[volume]]
name = "owned"
layout = "raid10"
policy = "always-on"
rebuild_mb_s = 400
[volume.export]
mount_point = "$OWNED"
owner = "nobody"
[[volume.member]]
kind = "file"
path = "$WORK/members/owned-0.img"
size = "48MiB"
profile = "test-fast"
[[volume.member]]
kind = "file"
path = "$WORK/members/owned-1.img"
size = "48MiB"
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
# The reply object only (the CLI repeats a refusal on stderr).
as_nobody() { runuser -u nobody -- "$BIN" --socket "$SOCK" request "$1" 2>/dev/null; }
# daemon with nogroup as its primary group: in the socket's group, but not the owner.
as_other() { runuser -u daemon -g nogroup -- "$BIN" --socket "$SOCK" request "$1" 2>/dev/null; }

start_agent() { # start_agent CONFIG LOG VOLUMES [NOTIFY_SOCKET]: returns once VOLUMES are up
	local sock
	if [ -n "${4:-}" ]; then
		NOTIFY_SOCKET=$4 "$BIN" serve --config "$1" >>"$2" 2>&1 &
	else
		"$BIN" serve --config "$1" >>"$2" 2>&1 &
	fi
	AGENT_PID=$!
	ALL_PIDS+=("$AGENT_PID")
	sock=$(sed -n 's/^socket = "\(.*\)"$/\1/p' "$1" | head -1)
	for _ in $(seq 1 160); do
		kill -0 "$AGENT_PID" 2>/dev/null || return 1
		if [ "$("$BIN" --socket "$sock" request '{"op":"volumes"}' --pointer /volumes 2>/dev/null | jq length 2>/dev/null)" = "$3" ]; then
			return 0
		fi
		sleep 0.25
	done
	return 1
}

# --- READY=1 only once the configured volumes are mounted ---------------------------------
NOTIFY=$WORK/notify.sock
"$PY" - "$NOTIFY" "$OWNED" >"$WORK/notify.log" 2>&1 <<'PY' &
import socket, subprocess, sys
path, mount_point = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(120)
try:
    while True:
        msg = s.recv(4096).decode()
        mounted = subprocess.run(["findmnt", "-n", mount_point], capture_output=True).returncode == 0
        print(f"{msg.strip()} mounted={'yes' if mounted else 'no'}", flush=True)
        if "READY=1" in msg:
            break
except socket.timeout:
    print("timeout", flush=True)
PY
listener=$!
for _ in $(seq 1 40); do [ -S "$NOTIFY" ] && break; sleep 0.1; done
if ! start_agent "$WORK/agent.toml" "$WORK/agent.log" 1 "$NOTIFY"; then
	fail "the agent starts" "$(tail -5 "$WORK/agent.log")"
	echo "$PASSED passed, $FAILED failed"
	exit 1
fi
for _ in $(seq 1 80); do grep -q "READY=1\|timeout" "$WORK/notify.log" && break; sleep 0.25; done
kill "$listener" 2>/dev/null
if grep -q "READY=1 mounted=yes" "$WORK/notify.log"; then
	pass "sd_notify READY=1 arrives, and only after the configured volume is mounted"
else
	fail "sd_notify READY=1 after the volumes are mounted" "notify log: $(tr '\n' ' ' <"$WORK/notify.log")"
fi

# --- IO_FLUSHER and mlockall ----------------------------------------------------------------
PF_MEMALLOC_NOIO=$((0x00080000))
noio_threads=0
all_threads=0
for stat in /proc/"$AGENT_PID"/task/*/stat; do
	flags=$(sed 's/.*) //' "$stat" | cut -d' ' -f7)
	all_threads=$((all_threads + 1))
	[ $((flags & PF_MEMALLOC_NOIO)) -ne 0 ] && noio_threads=$((noio_threads + 1))
done
CAP_SYS_RESOURCE=24
if [ $(((0x$(awk '/^CapEff:/ {print $2}' /proc/self/status) >> CAP_SYS_RESOURCE) & 1)) -eq 1 ]; then
	if [ "$all_threads" -gt 1 ] && [ "$noio_threads" -eq "$all_threads" ]; then
		pass "every agent thread ($all_threads) runs with PR_SET_IO_FLUSHER (PF_MEMALLOC_NOIO)"
	else
		fail "every agent thread runs with PR_SET_IO_FLUSHER" "$noio_threads of $all_threads threads"
	fi
	strict_expect=start
else
	skip "every agent thread runs with PR_SET_IO_FLUSHER" "this environment withholds CAP_SYS_RESOURCE, which the prctl needs"
	if grep -q "PR_SET_IO_FLUSHER failed: .*CAP_SYS_RESOURCE" "$WORK/agent.log" && kill -0 "$AGENT_PID"; then
		pass "a refused PR_SET_IO_FLUSHER is reported clearly and the agent keeps serving"
	else
		fail "a refused PR_SET_IO_FLUSHER is reported clearly" "$(grep -i flusher "$WORK/agent.log" || echo 'nothing in the log')"
	fi
	strict_expect=refuse
fi
mkdir -p "$WORK/strict"
printf '[agent]\nsocket = "%s"\nstate_dir = "%s"\nruntime_dir = "%s"\nstrict_memory = true\n' \
	"$WORK/strict/c.sock" "$WORK/strict" "$WORK/strict" >"$WORK/strict.toml"
timeout 10 "$BIN" serve --config "$WORK/strict.toml" >"$WORK/strict.log" 2>&1 &
strict_pid=$!
ALL_PIDS+=("$strict_pid")
strict_started=0
for _ in $(seq 1 40); do
	[ -S "$WORK/strict/c.sock" ] && strict_started=1 && break
	kill -0 "$strict_pid" 2>/dev/null || break
	sleep 0.25
done
kill -TERM "$strict_pid" 2>/dev/null
wait "$strict_pid"
strict_rc=$?
if [ "$strict_expect" = refuse ] && [ "$strict_started" -eq 0 ] && [ "$strict_rc" -ne 0 ] &&
	grep -q "memory hardening failed and agent.strict_memory is set" "$WORK/strict.log"; then
	pass "with agent.strict_memory a failed hardening stops the agent with a clear error"
elif [ "$strict_expect" = start ] && [ "$strict_started" -eq 1 ]; then
	pass "with agent.strict_memory and the capabilities present the agent starts"
else
	fail "agent.strict_memory" "expected $strict_expect; started $strict_started rc $strict_rc: $(tail -2 "$WORK/strict.log")"
fi
locked_kb=$(awk '/^VmLck:/ {print $2}' /proc/"$AGENT_PID"/status)
if [ "${locked_kb:-0}" -gt 0 ]; then
	pass "the agent's memory is locked (VmLck ${locked_kb} kB)"
else
	fail "the agent's memory is locked" "VmLck ${locked_kb:-?} kB"
fi

# --- control socket: lines, bound, idle timeout --------------------------------------------
lines=$("$PY" - "$SOCK" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(30)
try:
    s.sendall(b"x" * (2 << 20) + b"\n" + b'{"op":"volumes"}\n')
    f = s.makefile("rb")
    print(f.readline().decode().strip()); print(f.readline().decode().strip())
except OSError as e:
    print("connection error:", e)
PY
)
if echo "$lines" | sed -n 1p | is '.ok == false and (.error | contains("too long"))' &&
	echo "$lines" | sed -n 2p | is '.ok == true'; then
	pass "an oversize line gets an error reply and the same connection serves the next line"
else
	fail "an oversize line gets an error reply and the connection keeps serving" "$lines"
fi

bound=$("$PY" - "$SOCK" <<'PY'
import socket, sys, time
held = []
for _ in range(4):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(10)
    s.sendall(b'{"op":"volumes"}\n'); s.makefile("rb").readline()
    held.append(s)
extra = socket.socket(socket.AF_UNIX); extra.connect(sys.argv[1]); extra.settimeout(10)
try:
    print("fifth:", extra.makefile("rb").readline().decode().strip())
except socket.timeout:
    print("fifth: no reply")
start = time.time()
try:
    reply = held[0].makefile("rb").readline().decode().strip()
    print("idle:", reply, "eof:", held[0].recv(1) == b"", "after_s:", round(time.time() - start, 1))
except socket.timeout:
    print("idle: no reply within 10 s")
PY
)
if echo "$bound" | grep -q '^fifth: .*too many connections'; then
	pass "a connection beyond agent.max_connections is refused with an error"
else
	fail "a connection beyond agent.max_connections is refused" "$bound"
fi
if echo "$bound" | grep -q '^idle: .*idle for .* eof: True'; then
	pass "an idle connection is told and closed after agent.connection_idle_timeout_s"
else
	fail "an idle connection is closed" "$bound"
fi

# --- peer identity: recorded at connect time ------------------------------------------------
NOGROUP=$(getent group nogroup | cut -d: -f3)
cat >"$WORK/peer.py" <<'PY'
# Connect as uid 1 with the given groups, then change groups, then ask; print the reply.
import os, socket, sys
path, nogroup, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
before, after = ([nogroup], []) if mode == "drop" else ([], [nogroup])
os.setgroups(before)
os.setresgid(1, 1, 0)
os.setresuid(1, 1, 0)  # saved uid 0: lets this process change its groups again
s = socket.socket(socket.AF_UNIX); s.connect(path); s.settimeout(10)
os.seteuid(0); os.setgroups(after); os.seteuid(1)
s.sendall(b'{"op":"volumes"}\n')
print(s.makefile("rb").readline().decode().strip())
PY
dropped=$("$PY" "$WORK/peer.py" "$SOCK" "$NOGROUP" drop 2>&1)
if echo "$dropped" | is '.ok == true'; then
	pass "a peer in the group when it connected is served after it leaves the group (connect-time identity)"
else
	fail "a peer is judged by its connect-time groups (left the group after connecting)" "$dropped"
fi
chmod 0666 "$SOCK" # as if the socket file were reachable by anyone (a leaked descriptor)
gained=$("$PY" "$WORK/peer.py" "$SOCK" "$NOGROUP" gain 2>&1)
chmod 0660 "$SOCK"
if echo "$gained" | is '.ok == false and (.error | contains("permission denied"))'; then
	pass "a peer outside the group when it connected is refused even if it joins the group later"
else
	fail "a peer outside the group at connect time is refused" "$gained"
fi

# --- fail/replace_member: owner or root, member files only below member_directories ---------
member_health() { grs request "{\"op\":\"volume\",\"volume\":\"$1\"}" | jq -r ".volume.members[$2].health.health"; }
out=$(as_other '{"op":"fail_member","volume":"owned","member":1}')
if echo "$out" | grep -q "permission denied" && [ "$(member_health owned 1)" = in_sync ]; then
	pass "another user in the group cannot fail a member of nobody's volume"
else
	fail "another user cannot fail a member of someone else's volume" "$out; health $(member_health owned 1)"
fi
# set_temperature leaves lasting, journaled state (cold pairs may sleep whole): owner or root.
out=$(as_other '{"op":"set_temperature","volume":"owned","extents":[[0,4096]],"temperature":"cold"}')
if echo "$out" | grep -q "permission denied"; then
	pass "another user in the group cannot mark ranges of someone else's volume hot or cold"
else
	fail "another user cannot mark ranges of someone else's volume hot or cold" "$out"
fi
out=$(as_nobody '{"op":"fail_member","volume":"owned","member":1}')
if echo "$out" | is '.ok' && [ "$(member_health owned 1)" = failed ]; then
	pass "the volume's owner fails its member"
else
	fail "the volume's owner fails its member" "$out"
fi
out=$(as_other "{\"op\":\"replace_member\",\"volume\":\"owned\",\"member\":1,\"path\":\"$WORK/member-dir/other.img\"}")
if echo "$out" | grep -q "permission denied" && [ ! -e "$WORK/member-dir/other.img" ]; then
	pass "another user in the group cannot replace a member of nobody's volume"
else
	fail "another user cannot replace someone else's member" "$out"
fi
ln -s "$WORK/etc/shadow" "$WORK/member-dir/shadow-link"
grs fail-member owned 1 >/dev/null 2>&1 # (still) failed, whatever the steps above did
refused_all=1
details=""
for target in "$WORK/etc/shadow" "$WORK/member-dir/../etc/shadow" "$WORK/member-dir/shadow-link" "$WORK/member-dir"; do
	out=$(as_nobody "{\"op\":\"replace_member\",\"volume\":\"owned\",\"member\":1,\"path\":\"$target\"}")
	if ! echo "$out" | is '.ok == false and (.error | length > 0)'; then
		refused_all=0
		details="$details [$target: $out]"
	fi
done
if [ "$refused_all" -eq 1 ] && [ "$(shadow_sum)" = "$SHADOW_SUM" ] && [ -L "$WORK/member-dir/shadow-link" ] &&
	[ "$(stat -c %U:%a "$WORK/etc/shadow")" = root:640 ] && [ "$(member_health owned 1)" = failed ]; then
	pass "/etc/shadow-style replacement targets (outside, .., symlink, a directory) are refused and untouched"
else
	fail "/etc/shadow-style replacement targets are refused and untouched" \
		"$details shadow $(stat -c %U:%a:%s "$WORK/etc/shadow" 2>&1)"
fi
echo "$out" | grep -q "member_directories\|not a regular file\|symlink" &&
	pass "the refusal says why" || fail "the refusal says why" "$out"
out=$(as_nobody "{\"op\":\"replace_member\",\"volume\":\"owned\",\"member\":1,\"path\":\"$WORK/member-dir/owned-1b.img\"}")
health=""
for _ in $(seq 1 240); do
	health=$(member_health owned 1)
	[ "$health" = in_sync ] && break
	sleep 0.25
done
if echo "$out" | is '.ok' && [ "$health" = in_sync ] && [ -f "$WORK/member-dir/owned-1b.img" ]; then
	pass "the owner replaces its member with a new file below member_directories and it rebuilds"
else
	fail "the owner replaces its member below member_directories" "$out; health $health"
fi

install -d -o nobody -m 0755 "$WORK/dyn/mine"
out=$(as_nobody "{\"op\":\"create_volume\",\"name\":\"mine\",\"template\":\"scratch\",\"directory\":\"$WORK/dyn/mine\"}")
if echo "$out" | is '.ok'; then
	out=$(as_other '{"op":"fail_member","volume":"mine","member":0}')
	out2=$(as_other '{"op":"remove_volume","name":"mine"}')
	if echo "$out" | grep -q "permission denied" && echo "$out2" | grep -q "belongs to uid" &&
		findmnt "$WORK/dyn/mine" >/dev/null; then
		pass "another user in the group cannot fail members of, or remove, a caller's volume"
	else
		fail "another user cannot touch a caller's volume" "$out / $out2"
	fi
	as_nobody '{"op":"remove_volume","name":"mine"}' >/dev/null
else
	fail "an unprivileged caller creates a volume" "$out"
fi

# --- create_volume against a racing symlink swapper -----------------------------------------
# The swapper exchanges the requested directory with a symlink to WORK/victim (renameat2
# RENAME_EXCHANGE) as fast as it can, as the caller; no attempt may mount on or chown the
# victim, or mount anywhere outside WORK/dyn.
cat >"$WORK/swap.py" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (p.encode() for p in sys.argv[1:3])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
while True:
    libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
PY
victim_state() { stat -c %u:%g:%a "$WORK/victim"; }
VICTIM=$(victim_state)
escapes=""
created=0
refused=0
for k in $(seq 1 8); do
	base=$WORK/dyn/race$k
	install -d -o nobody -m 0755 "$base" "$base/pg"
	runuser -u nobody -- ln -s "$WORK/victim" "$base/pg.swap"
	runuser -u nobody -- "$PY" "$WORK/swap.py" "$base/pg" "$base/pg.swap" 2>/dev/null &
	swapper=$!
	ALL_PIDS+=("$swapper")
	sleep 0.2
	out=$(as_nobody "{\"op\":\"create_volume\",\"name\":\"race$k\",\"template\":\"scratch\",\"directory\":\"$base/pg\"}")
	kill "$swapper" 2>/dev/null
	wait "$swapper" 2>/dev/null
	if echo "$out" | is '.ok'; then
		created=$((created + 1))
	else
		refused=$((refused + 1))
		echo "# attempt $k refused: $(echo "$out" | jq -r .error 2>/dev/null || echo "$out")"
	fi
	outside=$(awk -v w="$WORK" -v d="$WORK/dyn/" -v r="$WORK/run/" -v m="$WORK/mnt/" \
		'index($5, w) == 1 && index($5, d) != 1 && index($5, r) != 1 && index($5, m) != 1 {print $5}' /proc/self/mountinfo)
	if [ -n "$outside" ] || [ "$(victim_state)" != "$VICTIM" ]; then
		escapes="$escapes [attempt $k: mounts outside: ${outside:-none}; victim $(victim_state)]"
		umount -l "$WORK/victim" 2>/dev/null
	fi
	grs request "{\"op\":\"remove_volume\",\"name\":\"race$k\"}" >/dev/null 2>&1
	[ -n "$escapes" ] && break
done
if [ -z "$escapes" ]; then
	pass "create_volume under a racing symlink swapper never mounts or chowns outside its tree ($created created, $refused refused)"
else
	fail "create_volume under a racing symlink swapper stays in its tree" "$escapes"
fi

# --- shutdown with sleeping emulated volumes --------------------------------------------------
kill -TERM "$AGENT_PID" && wait "$AGENT_PID"
SPIN_UP_S=4
sed -e 's/^name = "test-fast"/name = "test-slow-spin-up"/' -e "s/^spin_up_s = .*/spin_up_s = $SPIN_UP_S.0/" \
	"$WS/profiles/test-fast.toml" >"$WORK/slow.toml"
SOCK2=$WORK/run2/control.sock
mkdir -p "$WORK/run2" "$WORK/state2"
{
	printf '[agent]\nsocket = "%s"\nstate_dir = "%s"\nruntime_dir = "%s"\n' "$SOCK2" "$WORK/state2" "$WORK/run2"
	for v in 1 2 3 4; do
		mkdir -p "$WORK/mnt/sleepy$v"
		cat <<CONF
[[volume]]
name = "sleepy$v"
layout = "single"
policy = "cooperative:60"
[volume.export]
mount_point = "$WORK/mnt/sleepy$v"
[[volume.member]]
kind = "emulated-hdd"
path = "$WORK/members/sleepy$v.img"
size = "32MiB"
profile = "$WORK/slow.toml"
CONF
	done
} >"$WORK/sleepy.toml"
if start_agent "$WORK/sleepy.toml" "$WORK/sleepy.log" 4; then
	# A new filesystem writes for a while after its first mount (and each write wakes the
	# drive): ask again until all three are in standby at once.
	asleep=0
	for _ in $(seq 1 60); do
		sync
		asleep=0
		for v in 1 2 3 4; do
			if [ "$("$BIN" --socket "$SOCK2" request "{\"op\":\"volume\",\"volume\":\"sleepy$v\"}" --pointer /volume/state)" = standby ]; then
				asleep=$((asleep + 1))
			else
				"$BIN" --socket "$SOCK2" request "{\"op\":\"sleep\",\"volume\":\"sleepy$v\",\"expected_idle_s\":600}" >>"$WORK/sleep-replies.log" 2>&1
			fi
		done
		[ "$asleep" -eq 4 ] && break
		sleep 0.5
	done
	t0=$(date +%s.%N)
	kill -TERM "$AGENT_PID"
	wait "$AGENT_PID"
	rc=$?
	t1=$(date +%s.%N)
	stops=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/sleepy.log" | grep 'volume stopped' | cut -d' ' -f1 |
		while read -r ts; do date -d "$ts" +%s.%N; done)
	spread=$(echo "$stops" | awk 'NR == 1 {lo = $1; hi = $1} {if ($1 < lo) lo = $1; if ($1 > hi) hi = $1} END {printf "%.2f", hi - lo}')
	took=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
	echo "# shutdown of 4 sleeping volumes (spin-up ${SPIN_UP_S} s each): ${took} s, stops spread over ${spread} s"
	if [ "$asleep" -eq 4 ] && [ "$rc" -eq 0 ] && [ "$(echo "$stops" | grep -c .)" -eq 4 ] &&
		awk -v s="$spread" -v u="$SPIN_UP_S" 'BEGIN {exit !(s < u)}'; then
		pass "SIGTERM stops four sleeping volumes side by side (their spin-ups overlap), exit 0"
	else
		fail "SIGTERM stops sleeping volumes side by side" "asleep $asleep, rc $rc, stops spread ${spread} s (a spin-up is ${SPIN_UP_S} s)"
	fi
else
	fail "the agent with sleeping volumes starts" "$(tail -5 "$WORK/sleepy.log")"
fi
# A loop device whose detach is pending (autoclear) is held by a copy of the mount in another
# mount namespace (other test suites on this machine unshare theirs); the agent has let go.
held_loops=""
for dev in $(losetup -a 2>/dev/null | grep -F "$WORK" | cut -d: -f1); do
	if [ "$(cat "/sys/block/${dev#/dev/}/loop/autoclear" 2>/dev/null)" = 1 ]; then
		echo "# $dev: detach pending, held outside this mount namespace"
	else
		held_loops="$held_loops $dev"
	fi
done
if ! awk -v w="$WORK" 'index($5, w) == 1' /proc/self/mountinfo | grep -q . && [ -z "$held_loops" ]; then
	pass "nothing is left mounted or attached"
else
	fail "nothing is left mounted or attached" "$(awk -v w="$WORK" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | tr '\n' ' ') loops:${held_loops:- none}"
fi

echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
