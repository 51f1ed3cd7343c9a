# The scheduler reads durations from the storage agent's "volume" reply: a
# buggy or hostile agent sending a negative, infinite (beyond a double) or
# non-numeric spin-up time, or a ledger count that is no whole number, is
# an agent failure the status names (replay goes on as plain replay), never
# a value the planner uses; once the agent answers sensibly, it is
# connected again with its figures.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use FakeAgent;
use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $socket = "$PostgreSQL::Test::Utils::tmp_check/agent42.sock";
my $log = "$PostgreSQL::Test::Utils::tmp_check/agent42.log";
my $replies = "$PostgreSQL::Test::Utils::tmp_check/agent42-replies";
mkdir $replies;
my $agent = FakeAgent::start(socket => $socket, log => $log, replies_dir => $replies);

sub volume_reply
{
	my ($profile, $ledger) = @_;
	open my $fh, '>', "$replies/volume" or die "$replies/volume: $!";
	print $fh qq({"ok":true,"volume":{"name":"data","state":"active",)
	  . qq("profile":{"name":"fake",$profile})
	  . ($ledger ? qq(,"ledger":{$ledger}) : '') . "}}\n";
	close $fh;
}

volume_reply('"spin_up_s":-1,"break_even_s":0.5');

my $primary = new_primary('primary');
my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = defer
greenreplica.rto = 20s
greenreplica.agent_socket = '$socket'
greenreplica.agent_volume = 'data'
});

my @bad = (
	[ '"spin_up_s":-1,"break_even_s":0.5', '', 'spin_up_s is negative',
		'a negative spin-up time' ],
	[ '"spin_up_s":1e400,"break_even_s":0.5', '', 'spin_up_s is too large',
		'a spin-up time beyond a double' ],
	[ '"spin_up_s":0.2,"break_even_s":"soon"', '', 'break_even_s is not a number',
		'a break-even time that is no number' ],
	[ '"spin_up_s":0.2,"break_even_s":0.5,"spin_down_s":-3', '', 'spin_down_s is negative',
		'a negative spin-down time' ],
	[ '"spin_up_s":0.2,"break_even_s":0.5', '"reads":1.5,"writes":2,"spin_ups":0',
		'reads is not a whole number', 'a fractional ledger count' ],
);
for my $case (@bad)
{
	my ($profile, $ledger, $why, $what) = @$case;
	volume_reply($profile, $ledger);
	ok( $standby->poll_query_until(
			'postgres',
			"SELECT agent = 'error' AND strpos(agent_message, '$why') > 0
			   FROM greenreplica_status"),
		"$what: the agent is in error, the status says why ($why)")
	  or diag($standby->safe_psql('postgres',
		'SELECT agent, agent_message FROM greenreplica_status'));
}

# Sensible figures again: connected, and they are the ones used.
volume_reply('"spin_up_s":0.25,"break_even_s":0.5', '"reads":10,"writes":2,"spin_ups":1');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT agent = 'connected' AND spin_up_s = 0.25 FROM greenreplica_status"),
	'a sensible reply connects the agent again with its spin-up time');

$primary->wait_for_catchup($standby, 'replay');
pass('replay went on throughout');

$standby->stop;
$primary->stop;
kill 'KILL', $agent;
waitpid($agent, 0);
done_testing();
