#!/usr/bin/env bash
# Start (start DIR) or stop (stop DIR) the storage agent that the TAP suites
# use: a root daemon whose control socket the test user may use, and whose
# template "tap" gives each test its own emulated-disk volume (profile
# test-fast; "tap-36z15": ultrastar-36z15) mounted under DIR/volumes and owned by the test user.
# "start" prints the environment the TAP suites need.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

action=${1:?usage: test-agent.sh start|stop DIR}
dir=${2:?usage: test-agent.sh start|stop DIR}
bin=$PWD/contrib-storage/target/debug/greenreplica-storage

case "$action" in
start)
	[ -x "$bin" ] || (cd contrib-storage && cargo build --quiet)
	mkdir -p "$dir"/{run,state,volumes}
	chmod 755 "$dir" "$dir/run"
	chown "$GR_TEST_USER:" "$dir/volumes"
	cat >"$dir/agent.toml" <<CONF
[agent]
socket = "$dir/run/control.sock"
group = "$(id -gn "$GR_TEST_USER")"
state_dir = "$dir/state"
runtime_dir = "$dir/run"
volume_directories = ["$dir/volumes"]

[[template]]
name = "tap"
layout = "raid10"
members = 2
member_kind = "emulated-hdd"
member_size = "512MiB"
profile = "test-fast"
policy = "cooperative:60"

# The paper's drive (spin-up 26 s), for the RTO tests that need real figures.
[[template]]
name = "tap-36z15"
layout = "raid10"
members = 2
member_kind = "emulated-hdd"
member_size = "512MiB"
profile = "ultrastar-36z15"
policy = "cooperative:600"

# QMD (a mirrored pair plus a flash member, the last) for the tablespace temperatures.
[[template]]
name = "tap-qmd"
layout = "qmd"
members = 3
member_kind = "emulated-hdd"
member_size = "512MiB"
profile = "test-fast"
policy = "utilization:sleep_epochs=3"

# Track-aligned RAID5 of Maxtor Atlas 10K V members (issue 18): its boundaries
# are member track ends, for the extension's aligned prefetch runs.
[[template]]
name = "tap-raid5-tracks"
layout = "raid5-tracks"
members = 3
member_kind = "emulated-hdd"
member_size = "512MiB"
profile = "maxtor-atlas-10k-v"
policy = "cooperative:60"
CONF
	"$bin" serve --config "$dir/agent.toml" >>"$dir/agent.log" 2>&1 &
	echo $! >"$dir/agent.pid"
	for _ in $(seq 1 120); do
		if "$bin" --socket "$dir/run/control.sock" volumes >/dev/null 2>&1; then
			echo "GR_AGENT_SOCKET=$dir/run/control.sock"
			echo "GR_AGENT_BIN=$bin"
			echo "GR_AGENT_VOLUMES=$dir/volumes"
			exit 0
		fi
		kill -0 "$(cat "$dir/agent.pid")" 2>/dev/null || break
		sleep 0.25
	done
	cat "$dir/agent.log" >&2
	die "the storage agent did not start (log above)"
	;;
stop)
	if [ -f "$dir/agent.pid" ]; then
		pid=$(cat "$dir/agent.pid")
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 120); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$dir/agent.pid"
	fi
	# Whatever a crashed agent left behind (finding nothing is the usual case).
	for m in $(awk -v d="$dir" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	for l in $(losetup -a 2>/dev/null | awk -F: -v d="$dir" 'index($0, d) { print $1 }'); do
		losetup -d "$l" 2>/dev/null || true
	done
	;;
*)
	die "usage: test-agent.sh start|stop DIR"
	;;
esac
