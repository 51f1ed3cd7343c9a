# RTO kept: promote while replay sleeps with close to the most WAL the plan
# allows pending.  The promoted standby takes its first write within
# greenreplica.rto and holds everything the primary wrote.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $rto = 10;
my $primary = new_primary('primary');
$primary->command_ok(
	[ 'pgbench', '-i', '-s', '5', '-q', '-h', $primary->host, '-p', $primary->port, 'postgres' ],
	'pgbench tables loaded');
my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = defer
greenreplica.rto = ${rto}s
greenreplica.window_size = 24MB
});
ok($standby->poll_query_until('postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');

# Let the backlog grow to near the most the plan allows, then stop writing.
my $load = start_pgbench($primary, 120);
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND unapplied_bytes >= 0.7 * max_unapplied_bytes
		   FROM greenreplica_status"),
	'the backlog reached 70 % of its planned maximum while replay slept');
$load->kill_kill;
$primary->wait_for_catchup($standby, 'write');

my $s = standby_status($standby, 'phase', 'unapplied_bytes', 'max_unapplied_bytes', 'rto_estimate_s');
note("pending at promotion: $s->{unapplied_bytes} of $s->{max_unapplied_bytes} bytes, estimate $s->{rto_estimate_s} s");
cmp_ok($s->{unapplied_bytes}, '>', 1024 * 1024, 'megabytes of WAL were pending at promotion');

my $took = promote_and_time_first_write($standby);
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took, '<=', $rto, sprintf('promote to first committed write took %.2f s, within the RTO of %d s', $took // -1, $rto));

my $primary_fp = table_fingerprints($primary);
my $standby_fp = table_fingerprints($standby);
delete $standby_fp->{'postgres.public.first_write'};
is_deeply($standby_fp, $primary_fp, 'nothing the primary wrote was lost');

my $logged = standby_status($standby, 'last_promotion_s')->{last_promotion_s};
cmp_ok($logged, '<=', $rto, "the scheduler measured the promotion too ($logged s)");

done_testing();
