# Pause ownership: an archive-recovery standby that reached its
# recovery_target_lsn pauses there, and releasing that pause promotes it.
# The scheduler stands down when a recovery target is configured and never
# releases a pause it did not request: the standby stays in recovery.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('target_primary', init => { has_archiving => 1 });
$primary->safe_psql('postgres', 'CREATE TABLE t (id int)');
$primary->backup('target_base');
$primary->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(1, 100)');
my $target = $primary->lsn('insert');
$primary->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(101, 200)');
$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
$primary->poll_query_until('postgres',
	"SELECT last_archived_wal IS NOT NULL AND last_archived_wal >= pg_walfile_name(pg_current_wal_lsn() - 1)
	   FROM pg_stat_archiver")
  or die 'WAL not archived';

my $standby = PostgreSQL::Test::Cluster->new('target_standby');
$standby->init_from_backup($primary, 'target_base', has_restoring => 1);
$standby->append_conf('postgresql.conf', qq{
recovery_target_lsn = '$target'
recovery_target_action = 'pause'
greenreplica.mode = compact
});
$standby->start;

ok( $standby->poll_query_until(
		'postgres',
		"SELECT NOT pg_is_in_recovery() OR pg_get_wal_replay_pause_state() = 'paused'"),
	'replay reached the recovery target (or left recovery)');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is still in recovery at its target');

$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
sleep(3);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'after greenreplica_batch_now() the standby is still in recovery');
is($standby->safe_psql('postgres', 'SELECT pg_get_wal_replay_pause_state()'),
	'paused', 'PostgreSQL still holds its pause at the target');
my $s = standby_status($standby, 'phase', 'note');
is($s->{phase}, 'off', 'the scheduler stood down');
like($s->{note}, qr/recovery target is configured/, 'the note says why');
ok(!-e $primary->archive_dir . '/00000002.history',
	'no new timeline was written into the archive');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'), '100',
	'replay stopped at the target');

$standby->stop;
$primary->stop;
done_testing();
