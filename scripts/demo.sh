#!/usr/bin/env bash
# make demo: the main job end to end on this machine.
#
# What it shows today (the foundation): a primary and a streaming standby
# with greenreplica preloaded, the extension created on the primary and
# replicated, the scheduler running on the standby, data arriving there,
# and a promotion with its measured duration.  Deferred batch replay, the
# storage agent's volumes and the energy comparison are not part of the
# demo yet (see README.md, "Status").
set -euo pipefail
self_dir=$(cd "$(dirname "$0")" && pwd)
. "$self_dir/lib.sh"

if [ "${1:-}" != "--clusters" ]; then
	cd "$self_dir/.."
	require_root "make demo"
	bash scripts/install-deps.sh
	ensure_test_user
	say "building and installing the extension"
	make -s PG_CONFIG="$PG_CONFIG"
	make -s PG_CONFIG="$PG_CONFIG" install
	work=$(mktemp -d /tmp/greenreplica-demo.XXXXXX)
	chmod 755 "$work"
	cp scripts/demo.sh scripts/lib.sh "$work/"
	chown -R "$GR_TEST_USER:" "$work"
	status=0
	as_test_user bash "$work/demo.sh" --clusters "$work" || status=$?
	rm -rf "$work"
	exit $status
fi

# From here on: the unprivileged user, in the work directory.
work=$2
primary=$work/primary
standby=$work/standby
primary_port=${GR_DEMO_PRIMARY_PORT:-55432}
standby_port=${GR_DEMO_STANDBY_PORT:-55433}

cleanup() {
	for dir in "$standby" "$primary"; do
		[ -f "$dir/postmaster.pid" ] && pg_ctl -D "$dir" -m immediate stop >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT

psql_at() {
	psql -X -q -h "$work" -p "$1" -d postgres -v ON_ERROR_STOP=1 "${@:2}"
}

say "primary on port $primary_port"
initdb -D "$primary" -A trust --no-sync >/dev/null
cat >>"$primary/postgresql.conf" <<CONF
port = $primary_port
listen_addresses = ''
unix_socket_directories = '$work'
shared_preload_libraries = 'greenreplica'
wal_level = replica
CONF
pg_ctl -D "$primary" -l "$work/primary.log" -w start >/dev/null
psql_at "$primary_port" -c 'CREATE EXTENSION greenreplica'

say "standby on port $standby_port, streaming from the primary"
pg_basebackup -h "$work" -p "$primary_port" -D "$standby" -R -X stream >/dev/null
sed -i "s/^port = .*/port = $standby_port/" "$standby/postgresql.conf"
pg_ctl -D "$standby" -l "$work/standby.log" -w start >/dev/null

say "writing on the primary"
psql_at "$primary_port" -c "CREATE TABLE demo AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 100000) g"
lsn=$(psql_at "$primary_port" -Atc 'SELECT pg_current_wal_lsn()')
until [ "$(psql_at "$standby_port" -Atc "SELECT pg_last_wal_replay_lsn() >= '$lsn'")" = t ]; do sleep 0.2; done

say "greenreplica_status on each side"
psql_at "$primary_port" -c 'SELECT * FROM greenreplica_status'
for _ in $(seq 50); do
	[ "$(psql_at "$standby_port" -Atc "SELECT phase FROM greenreplica_status")" != inactive ] && break
	sleep 0.2
done
psql_at "$standby_port" -c 'SELECT * FROM greenreplica_status'
psql_at "$standby_port" -c 'SELECT count(*) AS rows_on_standby FROM demo'

say "failover: promoting the standby"
start=$(date +%s.%N)
pg_ctl -D "$standby" -w promote >/dev/null
psql_at "$standby_port" -c "INSERT INTO demo VALUES (0, 'first write after failover')"
end=$(date +%s.%N)
python3 -c "print('measured promote -> first committed write: %.3f s' % ($end - $start))"
psql_at "$standby_port" -c 'SELECT * FROM greenreplica_status'

say "done: deferred batches, agent volumes and the energy table arrive with the next issues"
