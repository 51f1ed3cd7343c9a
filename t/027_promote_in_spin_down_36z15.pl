# A drive cannot cut a spin-down short: on the paper's drive
# (ultrastar-36z15: spin-down 15 s, spin-up 26 s) a promotion requested just
# after the volume was put to sleep waits for both, 41 s.  With
# greenreplica.rto = 40 s the scheduler must not put the volume to sleep at
# all; the promotion right after a batch then stays within the RTO.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rto = 40;
my ($primary, $standby, $volume) = pair_on_agent_volume('spindown36', 2, qq{
greenreplica.rto = ${rto}s
greenreplica.max_apply_delay = 0
}, 'tap-36z15');
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');

# A light load: after a batch the expected idle time beats the drive's
# break-even time.
my $load = start_pgbench($primary, 300, '--rate=10');
ok( $standby->poll_query_until('postgres', 'SELECT r_gen > 0 FROM greenreplica_status'),
	'the WAL generation rate is measured');
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
ok( $standby->poll_query_until(
		'postgres', "SELECT batches >= 1 AND phase = 'sleep' FROM greenreplica_status"),
	'a batch ran and the standby is back in SLEEP');
diag('after the batch: '
	  . $standby->safe_psql('postgres', 'SELECT note FROM greenreplica_status'));

# At once, while a volume put to sleep would still be spinning down.
my $took = promote_and_time_first_write($standby);
$load->kill_kill;
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took // 1e9, '<=', $rto,
	sprintf('promote right after the batch to first committed write took %.2f s, within the RTO of %d s',
		$took // -1, $rto));
is($standby->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
	'primary', 'the standby is a primary now');

$standby->stop;
remove_agent_volume($volume);
done_testing();
