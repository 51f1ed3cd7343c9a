# RTO kept with compaction: the standby's tablespace is on an agent volume
# of emulated test-fast disks.  Promote while the scheduler is in its
# PREFETCH phase, reading a large window's blocks: the prefetch stops at
# once and the promoted standby takes its first write within
# greenreplica.rto.  The page cache would make the prefetch over in a few
# milliseconds, so the developer option greenreplica.debug_prefetch_delay
# makes each prefetch take 200 ms more: long enough to promote during it.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rto = 10;
my ($primary, $standby, $volume) = pair_on_agent_volume('prefetch', 10, qq{
greenreplica.mode = compact
greenreplica.rto = ${rto}s
greenreplica.window_size = 48MB
shared_buffers = 256MB
greenreplica.debug_prefetch_delay = 200ms
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');

my $load = start_pgbench($primary, 120, "--rate=400");
my $batches = standby_status($standby, 'batches')->{batches};
ok( $standby->poll_query_until(
		'postgres', "SELECT batches >= $batches + 2 FROM greenreplica_status"),
	'batches run under load');
ok(wait_for_phase($standby, 'prefetch', 90), 'the scheduler entered PREFETCH under load');

my $took = promote_and_time_first_write($standby);
$load->kill_kill;
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took, '<=', $rto,
	sprintf('promote during PREFETCH to first committed write took %.2f s, within the RTO of %d s',
		$took // -1, $rto));
is($standby->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
	'primary', 'the standby is a primary now');
ok($standby->log_contains('prefetch stopped for promotion'), 'the prefetch stopped at once for the promotion');

$standby->stop;
remove_agent_volume($volume);
done_testing();
