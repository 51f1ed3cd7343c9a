# Once half of greenreplica.max_spin_cycles_per_day is spent, a backlog that
# passes greenreplica.window_size no longer starts a batch: the pace holds it
# until the RTO bound starts one.  A standby that lets its backlog grow past
# the window looks stalled, so the note and the server log must say why.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $window = 1024 * 1024;
my ($primary, $standby, $volume) = pair_on_agent_volume('pacewin', 1, q{
greenreplica.rto = 300s
greenreplica.window_size = 1MB
greenreplica.max_apply_delay = 0
greenreplica.max_spin_cycles_per_day = 2
bgwriter_lru_maxpages = 0
});

ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND volume_state = 'standby' AND spin_cycles_today = 1 AND paced
		   FROM greenreplica_status"),
	'the volume went to sleep once: half of the budget spent, the standby is paced');
my $before = standby_status($standby, qw(batches));
like(
	slurp_file($standby->logfile),
	qr/1 of 2 spin cycles of the last 24 hours are left, batches are paced/,
	'the server log says when the pace starts');

# A few windows of WAL arrive, slowly enough (about 0.5 MB/s) that applying
# them stays far cheaper than generating them: the RTO bound (300 s) is far
# away.  One big statement would arrive at tens of MB/s, and a standby that
# cannot keep up replays continuously instead of batching.
for my $i (0 .. 11)
{
	my $from = $i * 2000 + 1;
	$primary->safe_psql('postgres',
		"UPDATE pgbench_accounts SET abalance = abalance + 1
		  WHERE aid BETWEEN $from AND $from + 1999");
	usleep(500_000);
}
$primary->wait_for_catchup($standby, 'write', $primary->lsn('insert'));
ok( $standby->poll_query_until(
		'postgres', "SELECT unapplied_bytes > $window FROM greenreplica_status"),
	'the backlog passed window_size');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT note LIKE 'batch held back by the pace (the backlog passed greenreplica.window_size)%'
		   FROM greenreplica_status"),
	'the note says that the pace holds the batch the window would start');
my $held = standby_status($standby,
	qw(batches phase volume_state unapplied_bytes rto_estimate_s rto_budget_s));
note(join(', ', map { "$_=$held->{$_}" } sort keys %$held));
is($held->{batches}, $before->{batches}, 'no batch started by window_size');
is($held->{phase}, 'sleep', 'the standby still sleeps');
is($held->{volume_state}, 'standby', 'and so does its volume');
cmp_ok($held->{rto_estimate_s}, '<', $held->{rto_budget_s},
	'the RTO estimate is within the budget: the RTO bound has no reason to start one');

# An operator's request runs, and applies the held WAL.
replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'a batch asked for applies the held WAL');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND volume_state = 'standby' AND spin_cycles_today = 2
		   FROM greenreplica_status"),
	'its wake spun the disks up: the sleep after it spends the second spin cycle');

$standby->stop;
remove_agent_volume($volume);
done_testing();
