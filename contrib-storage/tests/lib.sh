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
start_crash_writers() {
	local round=$1 direct=$2 job
	WRITERS=()
	for job in 1 2; do
		fio --ioengine=psync --bs=16k --name="w$job" --filename="$MNT/busy$job" --size=24M \
			--rw=randwrite --fsync=4 --time_based --runtime=30 --randseed=$((round * 10 + job)) \
			>>"$WORK/writers.log" 2>&1 &
		WRITERS+=($!)
	done
	for job in $(seq 1 "$direct"); do
		fio --ioengine=psync --bs=4k --direct=1 --name="same$job" --filename="$MNT/same" --size=1M \
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
