# greenreplica.max_spin_cycles_per_day budgets the disks' start/stop cycles.
# A QMD volume's write-only wake leaves its disks asleep but wakes its flash
# member, and the agent's ledger counts that wake among its spin-ups (the QMD
# standby of bench/energy spent 16 cycles for 10 disk spin-ups).  The agent
# reports the spinning members' spin-ups apart (disk_spin_ups); the budget
# must spend those alone.  The fake agent's wakes wake only its flash.
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
	wakes_spin => 0,
	flash_wakes => 1);
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

# Batches whose wakes wake the flash alone, each followed by a sleep request.
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
	'sleeps after wakes of the flash alone spend no spin cycle');
is($s->{paced}, 'f', 'so the budget is not paced');
like($s->{note}, qr/no spin cycle spent/, 'and the note says why');

is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

$standby->stop;
kill 'KILL', $agent;
waitpid($agent, 0);
$agent = undef;
done_testing();
