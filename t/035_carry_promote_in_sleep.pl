# A standby that carries dirty buffers across batches, on an agent volume, is
# promoted while it sleeps with buffers carried and WAL pending: its first
# committed write comes within the RTO, whose estimate charged the carried
# buffers' write, and it equals the primary.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rto = 30;
my ($primary, $standby, $volume) = pair_on_agent_volume('carry', 2, qq{
greenreplica.mode = compact
greenreplica.carry_dirty_buffers = on
greenreplica.rto = ${rto}s
greenreplica.max_spin_cycles_per_day = 1440
shared_buffers = 128MB
bgwriter_lru_maxpages = 0
checkpoint_timeout = 1d
recovery_prefetch = off
});
$primary->safe_psql('postgres', 'ALTER SYSTEM SET checkpoint_timeout = 3600');
$primary->reload;
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');

# Batches until one carries its buffers (the first write-back measures the
# time per buffer: until then the assumed 20 ms may not fit the budget).
my $carried = 0;
foreach my $round (1 .. 5)
{
	$primary->command_ok(
		[
			'pgbench', '-n', '-t', 300, '--rate=300', '-h', $primary->host,
			'-p', $primary->port, 'postgres'
		],
		"round $round: 300 pgbench transactions on the primary");
	replay_all($standby, $primary);
	$carried = standby_status($standby, 'write_back')->{write_back} =~ /dirty buffers carried/;
	last if $carried;
}
ok($carried, 'a batch carried its dirty buffers');
ok( $standby->poll_query_until('postgres',
		"SELECT volume_state = 'standby' FROM greenreplica_status"),
	'the volume sleeps with the buffers carried');
my $s = standby_status($standby, qw(carried_dirty_buffers carried_write_s rto_estimate_s rto_budget_s));
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
cmp_ok($s->{carried_dirty_buffers}, '>', 0, 'buffers are carried');
cmp_ok($s->{rto_estimate_s}, '>=', $s->{carried_write_s}, 'the RTO estimate charges their write');

# WAL pending on top of the carried buffers, then a promotion.
$primary->command_ok(
	[ 'pgbench', '-n', '-t', 200, '--rate=300', '-h', $primary->host, '-p', $primary->port, 'postgres' ],
	'more transactions, left pending');
$primary->wait_for_catchup($standby, 'write', $primary->lsn('insert'));
my $primary_fp = table_fingerprints($primary);
my $took = promote_and_time_first_write($standby);
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took, '<=', $rto,
	sprintf('promote with carried buffers to first committed write took %.2f s, within the RTO of %d s',
		$took // -1, $rto));
$standby->safe_psql('postgres', 'DROP TABLE first_write');
is_deeply(table_fingerprints($standby), $primary_fp,
	'the promoted standby equals the primary');
$standby->safe_psql($_, 'CREATE EXTENSION amcheck') foreach qw(template1 postgres);
amcheck_clean($standby, 'after promotion');

$standby->stop;
remove_agent_volume($volume);
done_testing();
