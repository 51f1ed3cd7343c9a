#!/usr/bin/env bash
# TPC-C-like workload for pgbench.  Connection from the libpq environment
# (PGHOST, PGPORT, PGDATABASE, ...).
#
#   tpcc.sh init WAREHOUSES [TABLESPACE]   schema, functions and data (4.3.3.1 cardinalities)
#   tpcc.sh run SECONDS CLIENTS [PGBENCH ARGS...]
#                                          the standard mix 45/43/4/4/4
#   tpcc.sh check                          the consistency conditions 1-4; exits 1 on a violation
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

case "${1:-}" in
init)
	warehouses=${2:?usage: tpcc.sh init WAREHOUSES [TABLESPACE]}
	tablespace=${3:-}
	{
		[ -n "$tablespace" ] && printf 'SET default_tablespace = %s;\n' "$tablespace"
		cat "$here/schema.sql" "$here/functions.sql"
		printf 'SELECT tpcc_load(%d);\n' "$warehouses"
	} | psql_q -f - >/dev/null
	psql_q -c 'VACUUM ANALYZE'
	;;
run)
	seconds=${2:?usage: tpcc.sh run SECONDS CLIENTS [PGBENCH ARGS...]}
	clients=${3:?usage: tpcc.sh run SECONDS CLIENTS [PGBENCH ARGS...]}
	shift 3
	warehouses=$(psql_q -At -c 'SELECT count(*) FROM warehouse')
	pgbench -n -T "$seconds" -c "$clients" -D warehouses="$warehouses" \
		-f "$here/new_order.pgbench@45" -f "$here/payment.pgbench@43" \
		-f "$here/order_status.pgbench@4" -f "$here/delivery.pgbench@4" \
		-f "$here/stock_level.pgbench@4" "$@"
	;;
check)
	psql_q -c 'SELECT * FROM tpcc_consistency()'
	bad=$(psql_q -At -c 'SELECT coalesce(sum(violations), 0) FROM tpcc_consistency()')
	[ "$bad" -eq 0 ] || { echo "tpcc: $bad consistency violations" >&2; exit 1; }
	;;
*)
	sed -n '2,9p' "$0" >&2
	exit 2
	;;
esac
