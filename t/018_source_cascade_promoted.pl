# The WAL source follows a new timeline while the standby sleeps: in a
# cascade primary -> S1 -> S2, both standbys batching, S1 is promoted.  S2's
# walreceiver reaches the end of timeline 1 and waits for the startup
# process, which sits paused; the watchdog releases replay, S2 follows
# timeline 2 and batches again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = qq{
greenreplica.mode = compact
greenreplica.rto = 1h
greenreplica.max_apply_delay = 0
};
my $primary = new_primary('cascade_primary');
my $s1 = new_standby($primary, 'cascade_s1', $conf);
$s1->backup('s1_base');
my $s2 = PostgreSQL::Test::Cluster->new('cascade_s2');
$s2->init_from_backup($s1, 's1_base', has_streaming => 1);
$s2->append_conf('postgresql.conf', $conf);
$s2->start;

$primary->safe_psql('postgres', 'CREATE TABLE t (id int)');
replay_all($s1, $primary);
$s1->wait_for_catchup($s2, 'write', $s1->lsn('receive'));
foreach my $node ($s1, $s2)
{
	ok( $node->poll_query_until(
			'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
		$node->name . ' batches');
}

# S2 holds WAL unapplied, replay paused, when its upstream is promoted.
$primary->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(1, 100)');
replay_all($s1, $primary);
ok( $s2->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND unapplied_bytes > 0 AND pg_is_wal_replay_paused()
		   FROM greenreplica_status"),
	'S2 sleeps with WAL pending');

$primary->stop;
$s1->promote;
$s1->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
$s1->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(101, 200)');

ok( $s2->poll_query_until(
		'postgres',
		"SELECT status = 'streaming' AND received_tli = 2 FROM pg_stat_wal_receiver"),
	'S2 streams timeline 2 from the promoted S1');
ok($s2->log_contains('replay released until streaming resumes'),
	'the scheduler logged why it released replay');
ok( $s2->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'S2 batches again');
my $batches = $s2->safe_psql('postgres', 'SELECT batches FROM greenreplica_status');
$s1->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(201, 300)');
replay_all($s2, $s1);
ok( $s2->poll_query_until(
		'postgres', "SELECT batches > $batches FROM greenreplica_status"),
	'a batch applied timeline 2 WAL');
is($s2->safe_psql('postgres', 'SELECT count(*) FROM t'), '300', 'S2 holds every row of both timelines');

$s2->stop;
$s1->stop;
done_testing();
