# A standby that enters batching writes back what free replay left dirty
# and spins its volume down at once: it does not idle, spun up, until its
# first batch.  The WAL that arrives meanwhile is applied by the first batch.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($primary, $standby, $volume) = pair_on_agent_volume('settle', 5, qq{
greenreplica.rto = 30s
greenreplica.window_size = 64MB
});

ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND volume_state = 'standby' AND batches = 0
		   FROM greenreplica_status"),
	'the volume is spun down before the first batch');
like(standby_status($standby, 'note')->{note},
	qr/volume asleep until the next batch/, 'the note says the volume sleeps');

my $reply = agent_request({ op => 'volume', volume => $volume });
ok($reply->{ok}, 'the agent describes the volume') or diag($reply->{error});
cmp_ok($reply->{volume}{ledger}{spin_downs} // 0,
	'>=', 1, "the agent's ledger booked the spin-down");

# WAL written while the volume sleeps is applied by a batch.
$primary->safe_psql('postgres', 'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 50 = 0');
replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'after its first batch the standby equals the primary');

$standby->stop;
remove_agent_volume($volume);
done_testing();
