#!/usr/bin/env bash
# Start or stop a storage agent for unprivileged test callers (PostgreSQL's TAP tests).
#
#   sudo contrib-storage/scripts/test-agent.sh start DIR [GROUP]   # prints the socket path
#   sudo contrib-storage/scripts/test-agent.sh stop DIR
#
# The agent serves no volume of its own. Callers in GROUP (default: postgres if it exists,
# else nogroup) create volumes over the socket from the templates below, in directories they
# own below DIR/volumes (mode 1777):
#   mkdir DIR/volumes/t1
#   greenreplica-storage --socket DIR/control.sock request \
#     '{"op":"create_volume","name":"t1","template":"tap","directory":"DIR/volumes/t1"}'
# Templates: "tap" (single file member, 256 MiB, cooperative), "tap-raid10" (two file members),
# "tap-hdd" (single emulated test-fast drive: real spin-up and spin-down delays).
# `stop` removes every volume the callers left behind (unmount, detach, delete).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { echo "usage: $0 start|stop DIR [GROUP]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$0: run as root (the agent mounts filesystems)" >&2; exit 1; }
BIN=${GRS_BIN:-$HERE/target/release/greenreplica-storage}
[ -x "$BIN" ] || BIN=$HERE/target/debug/greenreplica-storage
[ -x "$BIN" ] || { echo "$0: build the agent first (make storage)" >&2; exit 1; }

case "$cmd" in
start)
	GROUP=${3:-$(getent group postgres >/dev/null && echo postgres || echo nogroup)}
	mkdir -p "$DIR/volumes" "$DIR/state" "$DIR/run"
	chmod 0755 "$DIR" "$DIR/run"
	chmod 1777 "$DIR/volumes"
	cat >"$DIR/agent.toml" <<CONF
[agent]
socket = "$DIR/control.sock"
group = "$GROUP"
state_dir = "$DIR/state"
runtime_dir = "$DIR/run"
volume_directories = ["$DIR/volumes"]

[[template]]
name = "tap"
layout = "single"
members = 1
member_kind = "file"
member_size = "256MiB"
profile = "test-fast"
policy = "cooperative:60"

[[template]]
name = "tap-raid10"
layout = "raid10"
members = 2
member_kind = "file"
member_size = "256MiB"
profile = "test-fast"
policy = "cooperative:60"

[[template]]
name = "tap-hdd"
layout = "single"
members = 1
member_kind = "emulated-hdd"
member_size = "256MiB"
profile = "test-fast"
policy = "cooperative:60"
CONF
	"$BIN" serve --config "$DIR/agent.toml" >>"$DIR/agent.log" 2>&1 &
	echo $! >"$DIR/agent.pid"
	for _ in $(seq 1 100); do
		if "$BIN" --socket "$DIR/control.sock" volumes >/dev/null 2>&1; then
			echo "$DIR/control.sock"
			exit 0
		fi
		kill -0 "$(cat "$DIR/agent.pid")" 2>/dev/null || break
		sleep 0.1
	done
	echo "$0: the agent did not come up; see $DIR/agent.log" >&2
	tail -5 "$DIR/agent.log" >&2
	exit 1
	;;
stop)
	[ -f "$DIR/agent.pid" ] || exit 0
	pid=$(cat "$DIR/agent.pid")
	if kill -TERM "$pid" 2>/dev/null; then
		for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && { echo "$0: agent $pid did not stop; killing it" >&2; kill -KILL "$pid"; }
	fi
	rm -f "$DIR/agent.pid"
	;;
*)
	echo "usage: $0 start|stop DIR [GROUP]" >&2
	exit 2
	;;
esac
