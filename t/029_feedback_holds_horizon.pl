# hot_standby_feedback on a deferring standby: while replay is paused the
# standby reports the xmin horizon of its replay position, queries or not,
# so the primary's vacuum horizon stays there for the whole SLEEP and
# VACUUM on the primary cannot remove the rows updated meanwhile.  A batch
# moves the horizon on.  (This is why operations.md recommends feedback off.)
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($primary, $standby, $volume) = pair_on_agent_volume('feedback', 1, qq{
greenreplica.rto = 60s
greenreplica.max_apply_delay = 0
hot_standby_feedback = on
wal_receiver_status_interval = 1s
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby sleeps between batches');

# 500 transactions on the primary during SLEEP, each updating rows.
my $xid_before = $primary->safe_psql('postgres', 'SELECT txid_current()');
for my $i (1 .. 500)
{
	$primary->safe_psql('postgres',
		"UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid <= 100");
}
sleep(3);    # a few feedback messages
my $horizon_age = $primary->safe_psql('postgres',
	"SELECT age(backend_xmin) FROM pg_stat_replication");
$primary->safe_psql('postgres', 'VACUUM pgbench_accounts');
my $dead_held = $primary->safe_psql('postgres',
	"SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pgbench_accounts'");
is($standby->safe_psql('postgres', 'SELECT phase FROM greenreplica_status'),
	'sleep', 'the standby stayed in SLEEP meanwhile');
diag("during SLEEP: the standby's reported xmin is $horizon_age transactions old; "
	  . "VACUUM on the primary left $dead_held dead rows");
cmp_ok($horizon_age, '>=', 500, 'the feedback held the primary\'s horizon at the replay position');
cmp_ok($dead_held, '>=', 100 * 400, 'VACUUM on the primary could not remove the rows updated during SLEEP');

# A batch moves the horizon on, and VACUUM then removes them.
replay_all($standby, $primary);
$primary->safe_psql('postgres', 'SELECT txid_current()');
sleep(3);
my $horizon_after = $primary->safe_psql('postgres',
	"SELECT age(backend_xmin) FROM pg_stat_replication");
$primary->safe_psql('postgres', 'VACUUM pgbench_accounts');
my $dead_after = $primary->safe_psql('postgres',
	"SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pgbench_accounts'");
diag("after the batch: xmin $horizon_after transactions old; VACUUM left $dead_after dead rows");
cmp_ok($horizon_after, '<', 50, 'after the batch the horizon moved on');
cmp_ok($dead_after, '<', $dead_held / 10, 'after the batch VACUUM removed the rows');

$standby->stop;
remove_agent_volume($volume);
done_testing();
