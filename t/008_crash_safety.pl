# Crash safety: stop the standby with -m immediate in the middle of APPLY
# and in the middle of FLUSH; on restart it recovers, goes back to batching,
# catches up, equals the primary, and pg_amcheck finds nothing wrong.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('primary');
$primary->safe_psql('postgres', 'CREATE EXTENSION amcheck');
init_pgbench($primary, 5);
my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = defer
greenreplica.rto = 10s
greenreplica.window_size = 16MB
shared_buffers = 256MB
});

foreach my $phase ('apply', 'flush')
{
	my $load = start_pgbench($primary, 120, '--rate=400');
	ok(wait_for_phase($standby, $phase, 90), "the scheduler entered $phase under load");
	$standby->stop('immediate');
	$load->kill_kill;

	$standby->start;
	ok( $standby->poll_query_until(
			'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
		"after a crash in $phase the standby recovers and batches again");
	replay_all($standby, $primary);
	is_deeply(table_fingerprints($standby), table_fingerprints($primary),
		"after a crash in $phase the standby catches up and equals the primary");
}

$standby->command_ok(
	[ 'pg_amcheck', '--all', '--heapallindexed', '-h', $standby->host, '-p', $standby->port ],
	'pg_amcheck finds the standby clean');

done_testing();
