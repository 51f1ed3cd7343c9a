# Runs aligned to the volume's boundaries (issue 18): a compacting standby
# whose tablespace is on a track-aligned RAID5 volume asks the agent for the
# volume's boundaries (member track ends) once per batch and cuts or extends
# its os_cache read ranges and its hint around them.  The agent's
# "boundaries" op answers any peer, refuses hostile ranges, and a reload with
# greenreplica.boundary_slack = 0 turns alignment off.  Data stay equal.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($primary, $standby, $volume) = pair_on_agent_volume('tracks', 4, q{
greenreplica.mode = compact
greenreplica.prefetch_method = os_cache
greenreplica.rto = 30s
greenreplica.window_size = 4MB
recovery_prefetch = off
shared_buffers = 16MB
}, 'tap-raid5-tracks');

my $answer = GreenReplica::agent_request(
	{ op => 'boundaries', volume => $volume, offset => 0, len => 8 << 20 });
ok($answer->{ok}, 'the agent answers the boundaries op');
is($answer->{layout}, 'raid5-tracks', 'for the track-aligned RAID5 volume');
ok($answer->{aligned} && @{ $answer->{boundaries} } > 10,
	'with the member track ends inside the range');
my @b = @{ $answer->{boundaries} };
ok(!grep({ $b[$_] <= $b[ $_ - 1 ] } 1 .. $#b), 'ascending');

my $refused = GreenReplica::agent_request(
	{ op => 'boundaries', volume => $volume, offset => 0, len => 0 });
ok(!$refused->{ok} && $refused->{error} =~ /range length/, 'an empty range is refused');
$refused = GreenReplica::agent_request(
	{ op => 'boundaries', volume => $volume, offset => 1 << 62, len => 1 << 20 });
ok(!$refused->{ok}, 'a range past the volume is refused');
$refused = GreenReplica::agent_request(
	{ op => 'boundaries', volume => 'no-such-volume', offset => 0, len => 1 << 20 });
ok(!$refused->{ok} && $refused->{error} =~ /no volume named/, 'an unknown volume is refused');

ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');

# Rows updated in one batch need reads in the next: aligned then.
my $load = start_pgbench($primary, 90, '--rate=200');
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
sleep 1
  while !$standby->log_contains(qr/prefetch aligned to \d+ volume boundaries/)
  && time() < $deadline;
ok($standby->log_contains(qr/prefetch aligned to \d+ volume boundaries/),
	'a batch aligned its reads to the volume boundaries');
my ($before, $after) = slurp_file($standby->logfile) =~
  /ranges crossing one (\d+) -> (\d+)/;
cmp_ok($after // 1e9, '<=', $before // -1, 'alignment never adds a crossing');

# Off: no batch aligns any more.
$standby->append_conf('postgresql.conf', "greenreplica.boundary_slack = 0\n");
$standby->reload;
sleep 2;
my $aligned_lines = () = slurp_file($standby->logfile) =~ /prefetch aligned to/g;
my $batches = $standby->safe_psql('postgres', 'SELECT batches FROM greenreplica_status');
ok( $standby->poll_query_until(
		'postgres', "SELECT batches >= $batches + 2 FROM greenreplica_status"),
	'two more batches ran');
my $aligned_after = () = slurp_file($standby->logfile) =~ /prefetch aligned to/g;
is($aligned_after, $aligned_lines, 'with boundary_slack = 0 no batch aligns');
$load->kill_kill;

replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

$standby->stop;
remove_agent_volume($volume);
done_testing();
