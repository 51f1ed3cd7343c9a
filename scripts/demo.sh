#!/usr/bin/env bash
# make demo: the main job end to end on this machine.
#
# What it shows today: a primary and a streaming standby with greenreplica
# preloaded, the extension created on the primary and replicated, a pgbench
# load on the primary while the standby replays in batches scheduled from a
# 20 s RTO (its status printed as it goes), and a failover with the
# measured time to the first committed write.  The storage agent's volumes
# and the energy comparison are not part of the demo yet (see README.md,
# "Status").
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
cat >>"$standby/postgresql.conf" <<CONF
greenreplica.mode = defer
greenreplica.rto = 20s
greenreplica.window_size = 8MB
CONF
pg_ctl -D "$standby" -l "$work/standby.log" -w start >/dev/null

say "pgbench on the primary for 40 s; the standby replays in batches"
pgbench -i -s 5 -q -h "$work" -p "$primary_port" postgres >/dev/null 2>&1
pgbench -n -T 40 -c 2 -R 300 -h "$work" -p "$primary_port" postgres >"$work/pgbench.log" 2>&1 &
load=$!
printf '%-6s %-8s %12s %10s %8s %12s\n' time phase unapplied_kB r_gen_kB/s batches rto_est_s
for t in $(seq 0 2 40); do
	psql_at "$standby_port" -At -F ' ' -c "SELECT phase, unapplied_bytes / 1024,
		round(coalesce(r_gen, 0)::numeric / 1024), batches, round(rto_estimate_s::numeric, 2)
		FROM greenreplica_status" |
		while read -r phase unapplied rgen batches est; do
			printf '%-6s %-8s %12s %10s %8s %12s\n' "${t}s" "$phase" "$unapplied" "$rgen" "$batches" "$est"
		done
	sleep 2
done
wait $load || true

say "greenreplica_status on the standby"
psql_at "$standby_port" -x -c 'SELECT * FROM greenreplica_status'

say "failover: promoting the standby"
start=$(date +%s.%N)
pg_ctl -D "$standby" -w promote >/dev/null
psql_at "$standby_port" -c "INSERT INTO demo VALUES (0, 'first write after failover')"
end=$(date +%s.%N)
python3 -c "print('measured promote -> first committed write: %.3f s' % ($end - $start))"
psql_at "$standby_port" -c 'SELECT * FROM greenreplica_status'

say "done: deferred batches, agent volumes and the energy table arrive with the next issues"
