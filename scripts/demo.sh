#!/usr/bin/env bash
# make demo: the main job end to end on this machine (Debian 12, as root).
#
# Installs what it needs, builds the extension and the storage agent, then
# runs the energy benchmark at demo scale (bench/energy/energy.py): one
# primary and one standby per configuration (stock always-on, stock with
# idle timeouts, greenreplica defer and compact), each standby's tablespace
# on its own agent volume of emulated Deskstar T7K250 drives (RAID10), the
# same TPC-C-like run replicated to all of them.  It prints progress, the
# comparison table and the failover times, saves JSON and plots under
# bench/results/, and cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_root "make demo"
bash scripts/install-deps.sh
ensure_test_user

say "building and installing the extension"
make -s PG_CONFIG="$PG_CONFIG"
make -s PG_CONFIG="$PG_CONFIG" install

say "building the storage agent"
bash scripts/storage.sh build
[ "${1:-}" = --build-only ] && exit 0

say "energy benchmark, demo scale (about 8 minutes)"
/usr/bin/python3 bench/energy/energy.py \
	--profile deskstar-t7k250 --warehouses 1 --rate 100 \
	--duration "${GR_DEMO_DURATION:-360}" --rto 60 --window 64MB \
	--name latest
