# A window ends on a checkpoint record: with dirty buffers carried
# (greenreplica.carry_dirty_buffers, mode compact), a window whose last
# checkpoint record keeps most of its bytes, and after which a restartpoint
# will be due (here: half of max_wal_size kept since the last one), ends
# right after it, so the restartpoint falls at the batch end, writes the
# carried buffers and recycles the WAL before it; the WAL after the
# checkpoint waits for the next batch.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('primary', conf => "checkpoint_timeout = 1h\n");
init_pgbench($primary, 1);
$primary->safe_psql('postgres', 'CREATE TABLE filler (id int, pad text)');

my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = compact
greenreplica.carry_dirty_buffers = on
greenreplica.rto = 600s
shared_buffers = 64MB
greenreplica.max_apply_delay = 0
bgwriter_lru_maxpages = 0
checkpoint_timeout = 1d
max_wal_size = 64MB
min_wal_size = 32MB
recovery_prefetch = off
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');

# Several segments of WAL.
sub segments
{
	foreach (1 .. 4)
	{
		$primary->safe_psql('postgres',
			"INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 2000) g");
		$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
	}
	return;
}

# A first burst measures the replay rate: until then WAL arriving this fast
# starts small batches at once, which would cut the window below.
segments();
replay_all($standby, $primary);

# Several segments, then a checkpoint, then a little more WAL.
my $old_segment = $primary->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_current_wal_lsn())');
segments();
$primary->safe_psql('postgres', 'CHECKPOINT');
my ($checkpoint_lsn, $redo_lsn) = split /\|/, $primary->safe_psql('postgres',
	'SELECT checkpoint_lsn, redo_lsn FROM pg_control_checkpoint()');
$primary->safe_psql('postgres',
	"INSERT INTO filler SELECT g, 'after' FROM generate_series(1, 100) g");
my $end = $primary->lsn('insert');
$primary->wait_for_catchup($standby, 'write', $end);

my $before = standby_status($standby, qw(batches restartpoints));
is($standby->safe_psql('postgres', "SELECT pg_last_wal_replay_lsn() < '$checkpoint_lsn'"),
	't', 'no batch started on its own while the WAL arrived');
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
ok( $standby->poll_query_until('postgres',
		"SELECT batches > $before->{batches} AND phase = 'sleep' FROM greenreplica_status"),
	'a batch ran');
my $after = standby_status($standby,
	qw(batches restartpoints last_batch_ended_at_checkpoint write_back carried_dirty_buffers));
note(join(', ', map { "$_=$after->{$_}" } sort keys %$after));

is($after->{last_batch_ended_at_checkpoint}, 't', 'the window ended at its checkpoint record');
my $replayed = $standby->safe_psql('postgres', 'SELECT pg_last_wal_replay_lsn()');
is( $standby->safe_psql('postgres',
		"SELECT '$replayed'::pg_lsn > '$checkpoint_lsn'::pg_lsn AND '$replayed'::pg_lsn < '$end'::pg_lsn"),
	't',
	"replay stopped right after the checkpoint record ($checkpoint_lsn < $replayed < $end)");
cmp_ok($after->{restartpoints}, '>', $before->{restartpoints}, 'a restartpoint was taken at the batch end');
is($standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'),
	$redo_lsn, "the restartpoint is the primary's checkpoint (redo $redo_lsn)");
like($after->{write_back}, qr/written back: a restartpoint is due/,
	'the restartpoint wrote the dirty buffers back');
is($after->{carried_dirty_buffers}, 0, 'nothing is carried past the restartpoint');
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_ls_waldir() WHERE name = '$old_segment'"),
	0, "the segment before the checkpoint ($old_segment) was recycled");

# The rest arrives with the next batch.
replay_all($standby, $primary);
is($standby->safe_psql('postgres', "SELECT count(*) FROM filler WHERE pad = 'after'"),
	100, 'the WAL after the checkpoint is applied by the next batch');

done_testing();
