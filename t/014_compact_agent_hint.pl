# Cross-layer hint: before PREFETCH, a compacting standby whose tablespace
# is on an agent volume tells the agent which extents of the volume the
# window will read (the "hint" op, volume offsets from the filesystem's
# extent map).  The agent records them.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($primary, $standby, $volume) = pair_on_agent_volume('hint', 2, q{
greenreplica.mode = compact
greenreplica.rto = 20s
greenreplica.window_size = 4MB
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby batches with the agent');

my $before = GreenReplica::agent_request({ op => 'volume', volume => $volume });
ok($before->{ok}, 'the agent describes the volume');
is($before->{volume}{hints}, 0, 'no hint recorded yet');

# Rows updated in one batch need a read in the next: their blocks are
# hinted then.
my $load = start_pgbench($primary, 60, '--rate=200');
ok( $standby->poll_query_until(
		'postgres', 'SELECT last_batch_hint_extents > 0 FROM greenreplica_status'),
	'a batch hinted volume extents to the agent');
$load->kill_kill;

my $after = GreenReplica::agent_request({ op => 'volume', volume => $volume });
ok($after->{ok}, 'the agent describes the volume again');
cmp_ok($after->{volume}{hints}, '>', 0, 'the agent recorded the hinted extents');
cmp_ok($after->{volume}{hints}, '<=', 8192, 'at most 8192 extents per hint');

replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

$standby->stop;
remove_agent_volume($volume);
done_testing();
