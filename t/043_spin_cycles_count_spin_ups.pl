# greenreplica.max_spin_cycles_per_day budgets the disks' start/stop cycles.
# A batch whose wake spun no disk up (a write-only wake that a flash buffer
# absorbed: the QMD standby of bench/energy ran 12 such batches, was paced
# after them and started no batch for the rest of its run) leaves nothing
# to spin down, so its sleep must not spend a cycle.  The fake agent reports
# the volume's spin-ups in its ledger and never spins a disk up on a wake.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use FakeAgent;
use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $socket = "$PostgreSQL::Test::Utils::tmp_check/agent.sock";
my $log = "$PostgreSQL::Test::Utils::tmp_check/agent.log";
my $agent = FakeAgent::start(
	socket => $socket,
	log => $log,
	ledger => 1,
	wakes_spin => 0);
# The fake agent is a child process: stop it however the test ends.
END { kill 'KILL', $agent if $agent; }

my $primary = new_primary('primary');
init_pgbench($primary, 1);
my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = defer
greenreplica.rto = 60s
greenreplica.max_apply_delay = 0
greenreplica.max_spin_cycles_per_day = 8
bgwriter_lru_maxpages = 0
greenreplica.agent_socket = '$socket'
greenreplica.agent_volume = 'data'
});

sub sleeps_sent
{
	return scalar grep { $_ eq 'sleep' } FakeAgent::requests($log);
}

ok(wait_until_asleep($standby), 'the volume went to sleep');
is(standby_status($standby, 'spin_cycles_today')->{spin_cycles_today},
	1, 'the first sleep spends a spin cycle');

# Batches whose wakes spin no disk up, each followed by a sleep request.
my $sleeps = sleeps_sent();
for my $round (1 .. 4)
{
	$primary->safe_psql('postgres',
		"UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = $round");
	replay_all($standby, $primary);
	ok(wait_until_asleep($standby), "batch $round: the volume sleeps again");
}
cmp_ok(sleeps_sent(), '>=', $sleeps + 4, 'each batch ended with a sleep request');

my $s = standby_status($standby,
	qw(spin_cycles_today paced batches note));
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
is($s->{spin_cycles_today}, 1,
	'sleeps after wakes that spun no disk up spend no spin cycle');
is($s->{paced}, 'f', 'so the budget is not paced');
like($s->{note}, qr/no spin cycle spent/, 'and the note says why');

is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

$standby->stop;
kill 'KILL', $agent;
waitpid($agent, 0);
$agent = undef;
done_testing();
