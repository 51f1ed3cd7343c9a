# Pacing the day's start/stop budget: once half of
# greenreplica.max_spin_cycles_per_day is spent, the remaining spin cycles
# are spread out.  The staleness bound (greenreplica.max_apply_delay) then
# no longer starts a batch before the pace allows one, the status shows the
# budget and the pace, and a batch asked for still runs.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($primary, $standby, $volume) = pair_on_agent_volume('pace', 1, q{
greenreplica.rto = 300s
greenreplica.max_apply_delay = 10s
greenreplica.max_spin_cycles_per_day = 2
bgwriter_lru_maxpages = 0
});

ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND volume_state = 'standby' AND spin_cycles_today = 1
		   FROM greenreplica_status"),
	'the volume went to sleep once: one of two spin cycles spent');
my $s = standby_status($standby, qw(spin_cycle_budget paced pace_interval_s batches));
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
is($s->{spin_cycle_budget}, 2, 'the status shows the budget');
is($s->{paced}, 't', 'with half of it left the standby is paced');
cmp_ok($s->{pace_interval_s}, '>=', 43200,
	'one spin cycle left: the next one no sooner than half a day');

# WAL arrives and waits longer than the staleness bound: the pace holds it.
$primary->safe_psql('postgres',
	'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 50 = 0');
$primary->wait_for_catchup($standby, 'write', $primary->lsn('insert'));
ok( $standby->poll_query_until(
		'postgres',
		"SELECT note LIKE 'batch held back by the pace%' AND oldest_unapplied_age_s > 10
		   FROM greenreplica_status"),
	'past greenreplica.max_apply_delay the pace holds the batch back, and the note says so');
my $held = standby_status($standby, qw(batches phase volume_state));
is($held->{batches}, $s->{batches}, 'no batch started by the staleness bound');
is($held->{phase}, 'sleep', 'the standby still sleeps');
is($held->{volume_state}, 'standby', 'and so does its volume');

# An operator's request is no staleness bound: it runs.
replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'a batch asked for applies the held WAL');

$standby->stop;
remove_agent_volume($volume);
done_testing();
