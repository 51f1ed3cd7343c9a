# The WAL source survives a primary restart while the standby sleeps.
# PostgreSQL restarts its walreceiver only while the startup process waits
# for WAL, never while replay is paused: a sleeping standby would stay
# disconnected and the primary's synchronous commits would hang.  The
# scheduler's watchdog sees the walreceiver gone, releases replay until
# streaming resumes, then batches again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('restart_primary');
my $standby = new_standby($primary, 'restart_standby', qq{
greenreplica.mode = compact
greenreplica.rto = 1h
greenreplica.max_apply_delay = 0
});
$primary->append_conf('postgresql.conf', "synchronous_standby_names = 'restart_standby'\n");
$primary->reload;
$primary->safe_psql('postgres', 'CREATE TABLE acked (id int)');
ok( $primary->poll_query_until(
		'postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'restart_standby'"),
	'the standby is the synchronous standby');

# WAL waits unapplied while replay sleeps.
$primary->safe_psql('postgres', 'INSERT INTO acked SELECT generate_series(1, 1000)');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND unapplied_bytes > 0 AND pg_is_wal_replay_paused()
		   FROM greenreplica_status"),
	'replay sleeps with WAL pending');

$primary->restart;

# Synchronous commit needs the standby to reconnect.  statement_timeout
# does not cover the wait for the synchronous standby (it is disabled
# before commit), so the client bounds the wait itself.
my ($stdout, $stderr, $timed_out) = ('', '', 0);
my $ret = $primary->psql(
	'postgres',
	"SET statement_timeout = '30s'; INSERT INTO acked VALUES (1001)",
	stdout => \$stdout,
	stderr => \$stderr,
	timeout => 30,
	timed_out => \$timed_out);
ok(!$timed_out, 'the synchronous commit returned within 30 s');
is($ret, 0, 'the INSERT succeeded');
unlike($stderr, qr/canceling (the )?wait for synchronous replication/,
	'the synchronous commit was acknowledged, not cancelled');
ok( $standby->poll_query_until(
		'postgres', "SELECT status = 'streaming' FROM pg_stat_wal_receiver"),
	'pg_stat_wal_receiver shows streaming again');
ok($standby->log_contains('replay released until streaming resumes'),
	'the scheduler logged why it released replay');
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches again');

replay_all($standby, $primary);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM acked'),
	'1001', 'every acknowledged row is on the standby');

$standby->stop;
$primary->stop;
done_testing();
