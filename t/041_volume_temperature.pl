# The whole volume's temperature from SQL: greenreplica_set_volume_temperature()
# asks a (fake) storage agent for the volume's capacity and sends exactly one
# set_temperature request for [0, capacity).  An agent that refuses (a layout
# without temperatures) is relayed in PostgreSQL's voice, an absent agent is
# an error, and numbers a buggy or hostile agent sends (too large, negative,
# fractional, not numbers, beyond what numeric can hold) are clear errors that
# send nothing, never wrapped or truncated values.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use FakeAgent;
use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $capacity = 3 * 1024 * 1024 * 1024 + 65536;
my $socket = "$PostgreSQL::Test::Utils::tmp_check/agent41.sock";
my $log = "$PostgreSQL::Test::Utils::tmp_check/agent41.log";
my $replies = "$PostgreSQL::Test::Utils::tmp_check/agent41-replies";
mkdir $replies;
my $agent = FakeAgent::start(
	socket => $socket,
	log => $log,
	capacity_bytes => $capacity,
	layout => 'qmd',
	replies_dir => $replies);

my $node = new_primary('node', conf => qq{
greenreplica.agent_socket = '$socket'
greenreplica.agent_volume = 'data'
});

sub temperature_requests
{
	return grep { $_->{op} eq 'set_temperature' } FakeAgent::request_objects($log);
}

# The agent answers one op with a raw line until the file goes.
sub reply_with
{
	my ($op, $line) = @_;
	open my $fh, '>', "$replies/$op" or die "$replies/$op: $!";
	print $fh "$line\n";
	close $fh;
}

sub mark_volume
{
	my ($temperature) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT * FROM greenreplica_set_volume_temperature('$temperature')");
	return ($ret, $out, $err);
}

my ($ret, $out, $err) = mark_volume('cold');
is($ret, 0, 'the volume is marked cold') or diag($err);
is($out, "$capacity|1", 'its whole capacity, one range held by the agent');
my @sent = temperature_requests();
is(scalar @sent, 1, 'one set_temperature request was sent');
is_deeply(
	$sent[0],
	{
		op => 'set_temperature',
		volume => 'data',
		temperature => 'cold',
		extents => [ [ 0, $capacity ] ]
	},
	'the request marks [0, capacity) of the configured volume cold');

($ret, $out, $err) = mark_volume('normal');
is($out, "$capacity|1", 'normal is a temperature too');
is((temperature_requests())[-1]{temperature}, 'normal', 'and is sent as such');

($ret, $out, $err) = mark_volume('lukewarm');
like($err, qr/invalid temperature "lukewarm"/, 'an unknown temperature is refused');
is(scalar(temperature_requests()), 2, 'before anything is sent');

# A layout without temperatures: the agent's refusal, in PostgreSQL's words.
reply_with('set_temperature',
	'{"ok":false,"error":"layout raid1 keeps no hot or cold ranges"}');
($ret, $out, $err) = mark_volume('cold');
like($err, qr/ERROR:  could not mark volume "data" cold on the storage agent/,
	'a refusal is an error naming the volume and the temperature');
like($err, qr/DETAIL:  layout raid1 keeps no hot or cold ranges/,
	"whose detail is the agent's own reason");
($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nSELECT * FROM greenreplica_set_volume_temperature('cold')");
like($err, qr/ERROR:  55000:/, 'a refusal is object_not_in_prerequisite_state');
unlink "$replies/set_temperature";

# Numbers from a buggy or hostile agent: capacity_bytes.
my %bad_capacity = (
	'1e30' => qr/capacity_bytes is too large/,
	'18446744073709551616' => qr/capacity_bytes is too large/,
	'9223372036854775808' => qr/capacity_bytes is too large/,
	'-4096' => qr/capacity_bytes is negative/,
	'0' => qr/capacity_bytes is zero/,
	'1.5' => qr/capacity_bytes is not a whole number/,
	'"big"' => qr/capacity_bytes is not a number/,
	'1e1001' => qr/malformed reply from the storage agent: a number is too long or of too large an exponent/,
	('9' x 200) => qr/malformed reply from the storage agent: a number is too long or of too large an exponent/,
);
for my $bad (sort keys %bad_capacity)
{
	my $before = scalar(temperature_requests());
	reply_with('volume', qq({"ok":true,"volume":{"name":"data","capacity_bytes":$bad}}));
	($ret, $out, $err) = mark_volume('cold');
	like($err,
		qr/could not read the capacity of volume "data" from the storage agent/,
		"capacity_bytes " . substr($bad, 0, 24) . ": an error");
	like($err, $bad_capacity{$bad}, "capacity_bytes " . substr($bad, 0, 24) . ": says why");
	is(scalar(temperature_requests()), $before,
		"capacity_bytes " . substr($bad, 0, 24) . ": nothing is marked");
}
unlink "$replies/volume";

# The largest capacity a bigint holds is exact (no rounding through a double).
reply_with('volume', '{"ok":true,"volume":{"name":"data","capacity_bytes":9007199254740993}}');
($ret, $out, $err) = mark_volume('cold');
is($out, '9007199254740993|1', '2^53 + 1 bytes are returned exactly');
is_deeply((temperature_requests())[-1]{extents}, [ [ 0, 9007199254740993 ] ],
	'and sent exactly');
unlink "$replies/volume";

# The ranges the agent says it holds.
for my $bad ('1e30', '2147483648', '-1', '2.5', '"many"', 'null')
{
	reply_with('set_temperature', qq({"ok":true,"volume":"data","ranges":$bad}));
	($ret, $out, $err) = mark_volume('cold');
	like($err, qr/could not mark volume "data" cold on the storage agent/,
		"ranges $bad: an error");
	like($err, qr/reply to "set_temperature"(: ranges is| lacks ranges)/, "ranges $bad: says why");
}
unlink "$replies/set_temperature";

# Not for ordinary roles.
$node->safe_psql('postgres', 'CREATE ROLE nobody41 LOGIN');
($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE nobody41; SELECT * FROM greenreplica_set_volume_temperature('cold')");
like($err, qr/permission denied for function greenreplica_set_volume_temperature/,
	'an ordinary role may not mark the volume');

# The agent goes away.
kill 'KILL', $agent;
waitpid($agent, 0);
unlink $socket;
my $before = scalar(temperature_requests());
($ret, $out, $err) = mark_volume('cold');
like($err, qr/could not read the capacity of volume "data" from the storage agent/,
	'an absent agent is an error');
like($err, qr/could not connect/, 'whose detail says why');

$node->stop;
done_testing();
