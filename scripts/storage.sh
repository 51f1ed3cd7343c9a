#!/usr/bin/env bash
# Build (build) or lint and test (check) the storage agent's Rust workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

cd contrib-storage
case "${1:-build}" in
build)
	cargo build --release --locked 2>/dev/null || cargo build --release
	;;
check)
	say "storage agent: cargo fmt --check"
	cargo fmt --all -- --check
	say "storage agent: cargo clippy -D warnings"
	cargo clippy --all-targets -- -D warnings
	say "storage agent: cargo test"
	cargo test
	if [ -f tests/run-root-integration.sh ]; then
		say "storage agent: root integration tests"
		bash tests/run-root-integration.sh
	fi
	if [ -f tests/security-root.sh ]; then
		say "storage agent: root security tests"
		bash tests/security-root.sh
	fi
	if [ -f tests/integrity-root.sh ]; then
		say "storage agent: root integrity tests (kill -9 x20, mirrors compared)"
		bash tests/integrity-root.sh
	fi
	if [ -f tests/raid5-root.sh ]; then
		say "storage agent: RAID5 under PostgreSQL (a member failed and rebuilt under pgbench, kill -9 x6)"
		bash tests/raid5-root.sh
		say "storage agent: RAID6 under PostgreSQL (two members failed and rebuilt, kill -9 x3)"
		LAYOUT=raid6 ROUNDS=3 bash tests/raid5-root.sh
		say "storage agent: track-aligned RAID5 under PostgreSQL (raid5-tracks, a member rebuilt, kill -9 x3)"
		LAYOUT=raid5-tracks ROUNDS=3 bash tests/raid5-root.sh
		say "storage agent: track-aligned RAID5, rows on each member's own tracks (stripe = per_member, kill -9 x3)"
		LAYOUT=raid5-tracks STRIPE=per_member ROUNDS=3 bash tests/raid5-root.sh
		say "storage agent: RoLo-P under PostgreSQL (rotations, the on-duty logger failed and rebuilt, kill -9 x3)"
		LAYOUT=rolo-p ROUNDS=3 bash tests/raid5-root.sh
	fi
	if [ -f tests/qmd-root.sh ]; then
		say "storage agent: QMD under PostgreSQL (a cold tablespace's pair sleeps whole through a workload on the hot one, hot data served from its copy)"
		bash tests/qmd-root.sh
	fi
	if [ -f tests/qmd-pool-root.sh ]; then
		say "storage agent: two QMD volumes on one shared flash pool (buffered in the pool, kill -9, a removed volume's extents released by the operator)"
		bash tests/qmd-pool-root.sh
	fi
	if [ -f tests/ido-root.sh ]; then
		say "storage agent: IDO under PostgreSQL (a member failed under pgbench, writes redirected to the surrogate pair, rebuilt, reclaimed)"
		bash tests/ido-root.sh
	fi
	;;
*)
	die "usage: scripts/storage.sh build|check"
	;;
esac
