# A checkpoint whose restartpoint the checkpointer already took is not owed
# again: a standby replays the primary's checkpoint while it replays freely
# (mode off), the restartpoint is taken there (CHECKPOINT on the standby),
# and then batching begins with dirty buffers carried.  The first batch holds
# no checkpoint record: it must carry its buffers instead of writing them
# back for a restartpoint "due at this batch end" that has nothing to do.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('primary', conf => "checkpoint_timeout = 1h\n");
$primary->safe_psql('postgres', 'CREATE TABLE filler (id int, pad text)');

# checkpoint_timeout = 30s: any restartpoint owed at a batch end is due (the
# volume sleeps longer than that), so the decision rests on whether one is
# owed at all.
my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = off
greenreplica.carry_dirty_buffers = on
greenreplica.rto = 600s
greenreplica.max_apply_delay = 0
shared_buffers = 64MB
bgwriter_lru_maxpages = 0
checkpoint_timeout = 30s
recovery_prefetch = off
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'off' AND worker_pid IS NOT NULL FROM greenreplica_status"),
	'the scheduler runs, replaying freely in mode off');

# The primary's checkpoint, replayed freely, and its restartpoint taken.
$primary->safe_psql('postgres',
	"INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 2000) g");
$primary->safe_psql('postgres', 'CHECKPOINT');
my $redo_lsn = $primary->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
$primary->wait_for_catchup($standby, 'replay');
$standby->safe_psql('postgres', 'CHECKPOINT');
is($standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'),
	$redo_lsn, "the standby's restartpoint is at the primary's checkpoint (redo $redo_lsn)");

# Batching begins; the first batch has no checkpoint record in it.
$standby->safe_psql('postgres', "ALTER SYSTEM SET greenreplica.mode = 'compact'");
$standby->reload;
ok( $standby->poll_query_until(
		'postgres', "SELECT mode = 'compact' AND phase = 'sleep' FROM greenreplica_status"),
	'batching begins after the reload');
my $before = standby_status($standby, qw(batches restartpoints));
$primary->safe_psql('postgres',
	"INSERT INTO filler SELECT g, 'batch' FROM generate_series(1, 500) g");
replay_all($standby, $primary);
my $after = standby_status($standby,
	qw(batches restartpoints write_back carried_dirty_buffers));
note(join(', ', map { "$_=$after->{$_}" } sort keys %$after));

cmp_ok($after->{batches}, '>', $before->{batches}, 'a batch ran');
like($after->{write_back}, qr/dirty buffers carried/,
	'the first batch carries its dirty buffers: no restartpoint is owed');
cmp_ok($after->{carried_dirty_buffers}, '>', 0, 'buffers are carried');
is($after->{restartpoints}, $before->{restartpoints},
	'no restartpoint was requested for the checkpoint already restartpointed');
is($standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'),
	$redo_lsn, 'the restartpoint is still the one the checkpointer took');
is($standby->safe_psql('postgres', "SELECT count(*) FROM filler WHERE pad = 'batch'"),
	500, 'the batch applied its WAL');

done_testing();
