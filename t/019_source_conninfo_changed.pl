# The WAL source follows a primary_conninfo change while the standby sleeps.
# PostgreSQL re-points its walreceiver after a reload only when the startup
# process waits for WAL; a paused one goes on streaming from the old
# upstream.  The watchdog releases replay until the new walreceiver streams.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('conninfo_primary');
my $standby = new_standby($primary, 'conninfo_standby', qq{
greenreplica.mode = compact
greenreplica.rto = 1h
greenreplica.max_apply_delay = 0
});
$primary->safe_psql('postgres', 'CREATE TABLE t (id int); INSERT INTO t VALUES (1)');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND unapplied_bytes > 0 AND pg_is_wal_replay_paused()
		   FROM greenreplica_status"),
	'replay sleeps with WAL pending');
ok( $primary->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 'conninfo_standby'"),
	'the standby streams under its old application_name');

my $conninfo = $primary->connstr . " application_name=renamed_standby";
$standby->append_conf('postgresql.conf', "primary_conninfo = '$conninfo'\n");
$standby->reload;

ok( $primary->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 'renamed_standby'"),
	'the standby streams with the new primary_conninfo');
ok($standby->log_contains('primary_conninfo or primary_slot_name changed'),
	'the scheduler logged why it released replay');
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches again');
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (2)');
my $target = $primary->lsn('insert');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT greenreplica_batch_now() AND pg_last_wal_replay_lsn() >= '$target'"),
	'a batch applies what arrived through the new connection');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'), '2', 'the standby holds every row');

$standby->stop;
$primary->stop;
done_testing();
