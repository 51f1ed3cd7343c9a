# Pause ownership: an operator's pg_wal_replay_pause() holds until the
# operator resumes.  The planned batches (here the staleness bound, and a
# greenreplica_batch_now() request) do not move replay on meanwhile.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('opause_primary');
my $standby = new_standby($primary, 'opause_standby', qq{
greenreplica.mode = compact
greenreplica.rto = 1h
greenreplica.max_apply_delay = 2s
});
$primary->safe_psql('postgres', 'CREATE TABLE t (id int)');
replay_all($standby, $primary);
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND batches > 0 FROM greenreplica_status"),
	'the standby batches');

$standby->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
my $held_at = $standby->safe_psql('postgres', 'SELECT pg_last_wal_replay_lsn()');
$primary->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(1, 100)');
my $target = $primary->lsn('insert');
$primary->wait_for_catchup($standby, 'write', $target);

# Two staleness bounds and an explicit request pass.
sleep(5);
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
sleep(2);
is($standby->safe_psql('postgres', 'SELECT pg_last_wal_replay_lsn()'),
	$held_at, "the operator's pause held through the planned batches");
is($standby->safe_psql('postgres', 'SELECT pg_get_wal_replay_pause_state()'),
	'paused', 'replay is paused');
like(standby_status($standby, 'note')->{note}, qr/paused by the operator/,
	'the note says who holds replay');

$standby->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
ok( $standby->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$target'"),
	"after the operator's resume the standby replays");
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'), '100', 'every row arrived');

$standby->stop;
$primary->stop;
done_testing();
