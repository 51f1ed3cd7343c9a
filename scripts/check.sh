#!/usr/bin/env bash
# make check: every test of the project, on a fresh Debian 12 machine, as root.
#  1. system packages (scripts/install-deps.sh)
#  2. the storage agent: rustfmt, clippy -D warnings, cargo test, root tests
#  3. the extension: build and install as root, then pg_regress and TAP as
#     an unprivileged user (PostgreSQL refuses root) on a staged copy
# Each runner prints its own summary; the first failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_root "make check"
bash scripts/install-deps.sh
ensure_test_user

bash scripts/storage.sh check

say "extension: unit tests of the pure planner, the window's block set and the agent's numbers"
unit_dir=$(mktemp -d)
cc -std=c99 -Wall -Wextra -Werror -O2 -o "$unit_dir/test_plan" test/unit/test_plan.c src/gr_plan.c -lm
"$unit_dir/test_plan"
cc -std=c99 -Wall -Wextra -Werror -O2 -o "$unit_dir/test_fold" test/unit/test_fold.c src/gr_fold.c
"$unit_dir/test_fold"
cc -std=c99 -Wall -Wextra -Werror -O2 -o "$unit_dir/test_wake" test/unit/test_wake.c src/gr_wake.c
"$unit_dir/test_wake"
cc -std=c99 -Wall -Wextra -Werror -O2 -o "$unit_dir/test_number" test/unit/test_number.c src/gr_number.c
"$unit_dir/test_number"
rm -rf "$unit_dir"

say "extension: build and install"
make -s PG_CONFIG="$PG_CONFIG" clean
make -s PG_CONFIG="$PG_CONFIG"
make -s PG_CONFIG="$PG_CONFIG" install

stage=$(mktemp -d /tmp/greenreplica-check.XXXXXX)
chmod 755 "$stage"
stage_tree_for_test_user "$stage/src"

# The TAP suites put standby tablespaces on volumes of a real storage agent.
say "storage agent for the TAP suites"
agent_dir="$stage/agent"
trap 'bash scripts/test-agent.sh stop "$agent_dir"' EXIT
agent_env=$(bash scripts/test-agent.sh start "$agent_dir")
echo "$agent_env"

status=0
say "extension: pg_regress and TAP suites as $GR_TEST_USER"
# shellcheck disable=SC2086 # agent_env is NAME=value lines
if ! (cd "$stage/src" && as_test_user env $agent_env make -s PG_CONFIG="$PG_CONFIG" installcheck); then
	status=1
	for f in "$stage"/src/regression.diffs; do
		[ -f "$f" ] && { say "$f"; cat "$f"; }
	done
	for f in "$stage"/src/tmp_check/log/regress_log_*; do
		[ -f "$f" ] && { say "$f (last 60 lines)"; tail -n 60 "$f"; }
	done
fi

bash scripts/test-agent.sh stop "$agent_dir"
trap - EXIT
if [ $status -eq 0 ]; then
	rm -rf "$stage"
	say "make check: all suites passed"
else
	say "make check: FAILED (logs kept in $stage)"
fi
exit $status
