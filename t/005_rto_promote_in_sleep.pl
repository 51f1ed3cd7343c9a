# RTO kept: the standby's tablespace is on an agent volume of emulated
# test-fast disks.  Promote while replay sleeps, the volume is spun down and
# close to the most WAL the plan allows is pending: the promoted standby
# takes its first write within greenreplica.rto (spin-up included) and
# holds everything the primary wrote.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rto = 10;
my ($primary, $standby, $volume) = pair_on_agent_volume('sleep', 5, qq{
greenreplica.rto = ${rto}s
greenreplica.window_size = 24MB
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');

# Let the backlog grow to near the most the plan allows while the volume
# sleeps, then stop writing.
my $load = start_pgbench($primary, 120, "--rate=400");
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND volume_state = 'standby'
		    AND unapplied_bytes >= 0.7 * max_unapplied_bytes
		   FROM greenreplica_status"),
	'the backlog reached 70 % of its planned maximum while the volume slept');
$load->kill_kill;
$primary->wait_for_catchup($standby, 'write');

my $s = standby_status($standby, 'unapplied_bytes', 'max_unapplied_bytes', 'rto_estimate_s',
	'spin_up_s', 'volume_state');
note("pending at promotion: $s->{unapplied_bytes} of $s->{max_unapplied_bytes} bytes, "
	  . "volume $s->{volume_state}, estimate $s->{rto_estimate_s} s");
cmp_ok($s->{unapplied_bytes}, '>', 1024 * 1024, 'megabytes of WAL were pending at promotion');
cmp_ok($s->{spin_up_s}, '>', 0, "the agent reported the volume's spin-up time");

my $took = promote_and_time_first_write($standby);
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took, '<=', $rto,
	sprintf('promote to first committed write took %.2f s, within the RTO of %d s', $took // -1, $rto));

my $primary_fp = table_fingerprints($primary);
my $standby_fp = table_fingerprints($standby);
delete $standby_fp->{'postgres.public.first_write'};
is_deeply($standby_fp, $primary_fp, 'nothing the primary wrote was lost');

my $logged = standby_status($standby, 'last_promotion_s')->{last_promotion_s};
cmp_ok($logged, '<=', $rto, "the scheduler measured the promotion too ($logged s)");

$standby->stop;
remove_agent_volume($volume);
done_testing();
