# Memory bound: with a buffer pool far smaller than a window's blocks, the
# scheduler splits each window where its reads would no longer fit and
# replays the parts one after the other.  Split windows behave like one:
# the standby ends up equal to the primary.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('primary');
init_pgbench($primary, 3);

# 1MB of shared buffers: 128 buffers, so a window may hold 32 reads.
my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = compact
# the shared-buffers read path is the one that splits (os_cache is bounded by RAM)
greenreplica.prefetch_method = buffers
greenreplica.rto = 30s
greenreplica.window_size = 16MB
shared_buffers = 1MB
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');
is($standby->safe_psql('postgres', 'SHOW shared_buffers'), '1MB', 'a small buffer pool');

# First touch every page of pgbench_accounts since the last checkpoint:
# their full-page images go by in this batch.
$primary->safe_psql('postgres',
	'UPDATE pgbench_accounts SET filler = filler WHERE aid % 40 = 0');
replay_all($standby, $primary);
my $before = standby_status($standby, 'batches', 'window_splits');

# Then random updates all over it, without a checkpoint: every block needs
# a read now, many more than 32 in one batch.
$primary->command_ok(
	[ 'pgbench', '-n', '-t', '1500', '-h', $primary->host, '-p', $primary->port, 'postgres' ],
	'random updates');
replay_all($standby, $primary);

my $s = standby_status($standby,
	qw(batches window_splits last_batch_windows last_batch_reads_needed total_block_refs));
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
cmp_ok($s->{batches}, '>', $before->{batches}, 'batches ran');
cmp_ok($s->{window_splits}, '>', $before->{window_splits}, 'windows were split for memory');
cmp_ok($s->{last_batch_windows}, '>=', 1, 'the last batch reports its windows');

is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'split windows replayed like one: the standby equals the primary');

done_testing();
