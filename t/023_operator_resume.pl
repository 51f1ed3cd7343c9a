# Pause ownership: an operator's pg_wal_replay_resume() during SLEEP means
# "replay continuously until the next batch".  The status says so (not
# "sleep" while replay runs), and batching resumes at the next batch.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('oresume_primary');
my $standby = new_standby($primary, 'oresume_standby', qq{
greenreplica.mode = compact
greenreplica.rto = 1h
greenreplica.max_apply_delay = 0
});
$primary->safe_psql('postgres', 'CREATE TABLE t (id int)');
replay_all($standby, $primary);
$primary->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(1, 100)');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND unapplied_bytes > 0 AND pg_is_wal_replay_paused()
		   FROM greenreplica_status"),
	'replay sleeps with WAL pending');
my $batches = $standby->safe_psql('postgres', 'SELECT batches FROM greenreplica_status');

$standby->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
my $target = $primary->lsn('insert');
ok( $standby->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$target'"),
	'replay runs after the resume');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'continuous' AND note LIKE '%resumed by the operator%' FROM greenreplica_status"),
	'the status says replay runs continuously until the next batch');

# The next batch: the scheduler pauses at its end and sleeps again.
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND batches > $batches FROM greenreplica_status"),
	'batching resumed with the next batch');
$primary->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(101, 200)');
$target = $primary->lsn('insert');
$primary->wait_for_catchup($standby, 'write', $target);
sleep(2);
is($standby->safe_psql('postgres', "SELECT pg_last_wal_replay_lsn() >= '$target'"),
	'f', 'new WAL waits for a batch again');
replay_all($standby, $primary);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'), '200', 'every row arrived');

$standby->stop;
$primary->stop;
done_testing();
