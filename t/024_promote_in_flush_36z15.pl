# No spin-down after a promote request: on the paper's drive
# (ultrastar-36z15, spin-up 26 s) a FLUSH that blocks (here made to take
# 3 s more, as a restartpoint or a sync can) must not end by putting the
# volume to sleep when a promotion was requested meanwhile.  The agent
# books no spin-down after the promote, and the RTO holds.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rto = 60;
my ($primary, $standby, $volume) = pair_on_agent_volume('flush36', 5, qq{
greenreplica.rto = ${rto}s
greenreplica.window_size = 48MB
greenreplica.max_apply_delay = 0
greenreplica.debug_flush_delay = 3s
shared_buffers = 256MB
}, 'tap-36z15');
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');
cmp_ok(standby_status($standby, 'spin_up_s')->{spin_up_s}, '>=', 20,
	'the volume has the spin-up time of the ultrastar-36z15');

# A light load: after a batch the expected idle time beats the drive's
# break-even time, so a FLUSH ends by putting the volume to sleep.
my $load = start_pgbench($primary, 400, '--rate=10');
ok( $standby->poll_query_until('postgres', 'SELECT r_gen > 0 FROM greenreplica_status'),
	'the WAL generation rate is measured');
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT batches = 1 AND phase = 'sleep' AND note LIKE 'volume asleep until the next batch%'
		   FROM greenreplica_status"),
	'without a promotion, FLUSH ends with the volume put to sleep');

# The same again, promoted during FLUSH.
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
ok(wait_for_phase($standby, 'flush', 120), 'the scheduler entered FLUSH');

sub spin_downs
{
	my $reply = agent_request({ op => 'volume', volume => $volume });
	return $reply->{volume}{ledger}{spin_downs} // die 'no ledger: ' . ($reply->{error} // '?');
}
my $before = spin_downs();
my $took = promote_and_time_first_write($standby);
$load->kill_kill;

# The FLUSH under way ends after the promotion; the scheduler then exits.
ok( $standby->poll_query_until(
		'postgres', 'SELECT worker_pid IS NULL FROM greenreplica_status'),
	'the scheduler finished its FLUSH and exited');
# A sleep request, accepted, spins an idle volume down within moments.
sleep(5);
my $after = spin_downs();

ok(defined $took, 'the promoted standby took a write');
is($after, $before, 'the agent booked no spin-down after the promote request');
cmp_ok($took, '<=', $rto,
	sprintf('promote during FLUSH to first committed write took %.2f s, within the RTO of %d s',
		$took // -1, $rto));
is($standby->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
	'primary', 'the standby is a primary now');

$standby->stop;
remove_agent_volume($volume);
done_testing();
