# RTO kept: the standby's tablespace is on an agent volume of emulated
# test-fast disks.  Promote while the scheduler is in its APPLY phase,
# with a large batch under way: the promoted standby takes its first write
# within greenreplica.rto.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rto = 10;
my ($primary, $standby, $volume) = pair_on_agent_volume('apply', 5, qq{
greenreplica.rto = ${rto}s
greenreplica.window_size = 48MB
shared_buffers = 256MB
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');

my $load = start_pgbench($primary, 120, "--rate=400");
ok(wait_for_phase($standby, 'apply', 90), 'the scheduler entered APPLY under load');

my $took = promote_and_time_first_write($standby);
$load->kill_kill;
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took, '<=', $rto,
	sprintf('promote during APPLY to first committed write took %.2f s, within the RTO of %d s',
		$took // -1, $rto));
is($standby->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
	'primary', 'the standby is a primary now');

$standby->stop;
remove_agent_volume($volume);
done_testing();
