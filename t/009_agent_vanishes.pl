# The storage agent cooperates (wake before a batch, sleep after it), then
# is killed while the volume sleeps: replay goes on as plain replay, nothing
# hangs, the status and one log line say so; when the agent is back,
# batching resumes.  An agent that answers garbage is an error, not a crash.
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
my $agent = FakeAgent::start(socket => $socket, log => $log);

my $primary = new_primary('primary');
init_pgbench($primary, 2);
my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = defer
greenreplica.rto = 20s
greenreplica.window_size = 2MB
greenreplica.agent_socket = '$socket'
greenreplica.agent_volume = 'data'
});

# Cooperation: batches wake the volume and put it back to sleep.
# Throttled: the standby must catch up between batches whatever the machine's speed (an
# unthrottled pgbench on a busy 2-core box can outrun a 2 MB window for minutes).
my $load = start_pgbench($primary, 300, '--rate=200');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT agent = 'connected' AND batches >= 2 AND volume_state = 'standby' AND phase = 'sleep'
		   FROM greenreplica_status"),
	'with an agent, batches run and the volume is put to sleep between them');
my @ops = FakeAgent::requests($log);
ok((grep { $_ eq 'sleep' } @ops), 'the scheduler asked the agent to sleep');
ok((grep { $_ eq 'wake' } @ops), 'the scheduler asked the agent to wake before a batch');
my $spin_up = standby_status($standby, 'spin_up_s', 'break_even_s');
is($spin_up->{spin_up_s}, '0.2', "the volume's spin-up time comes from the agent");

# Kill the agent while the volume sleeps.
my $pid_before = standby_status($standby, 'worker_pid')->{worker_pid};
kill 'KILL', $agent;
waitpid($agent, 0);
unlink $socket;

ok( $standby->poll_query_until(
		'postgres',
		"SELECT agent = 'error' AND phase = 'continuous' AND agent_message IS NOT NULL
		   FROM greenreplica_status"),
	'a vanished agent is reported and replay turns continuous');
$load->kill_kill;
$primary->wait_for_catchup($standby, 'replay');
pass('replay goes on without the agent: the standby caught up with the primary');
is(standby_status($standby, 'worker_pid')->{worker_pid}, $pid_before,
	'the scheduler survived the agent');
my $incidents = () = slurp_file($standby->logfile) =~ /greenreplica storage agent failed/g;
is($incidents, 1, 'one log line for the incident');

# The agent comes back: batching resumes.
$agent = FakeAgent::start(socket => $socket, log => $log);
ok( $standby->poll_query_until(
		'postgres',
		"SELECT agent = 'connected' AND phase = 'sleep' FROM greenreplica_status"),
	'when the agent answers again, batching resumes');

# An agent that answers garbage.
kill 'KILL', $agent;
waitpid($agent, 0);
$agent = FakeAgent::start(socket => $socket, log => $log, malformed => 1);
ok( $standby->poll_query_until(
		'postgres',
		"SELECT agent = 'error' AND agent_message LIKE '%malformed reply%' FROM greenreplica_status"),
	'a malformed reply is reported as an agent error');
is(standby_status($standby, 'worker_pid')->{worker_pid}, $pid_before,
	'the scheduler survived the malformed reply');

kill 'KILL', $agent;
waitpid($agent, 0);
replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

done_testing();
