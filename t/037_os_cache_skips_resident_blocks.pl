# PREFETCH through the OS page cache (prefetch_method = os_cache) leaves out
# the blocks still in shared buffers: a batch whose blocks the previous batch
# left in the pool reads none of them again, counts them in
# last_batch_blocks_cached, and the data stay equal to the primary's.  The
# developer option greenreplica.debug_prefetch_resident restores the old
# behaviour (for benchmarks): then they are read again.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('primary', conf => "checkpoint_timeout = 1h\n");
$primary->safe_psql('postgres',
	'CREATE TABLE items AS SELECT g AS id, 0 AS v, repeat(\'x\', 100) AS pad
	   FROM generate_series(1, 20000) g');

my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = compact
greenreplica.prefetch_method = os_cache
greenreplica.rto = 600s
greenreplica.max_apply_delay = 0
shared_buffers = 128MB
recovery_prefetch = off
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');

my @columns = qw(last_batch_reads_needed last_batch_blocks_cached
  last_batch_prefetch_bytes last_batch_prefetch_ios);

# One batch after the primary's checkpoint: every first change of a page
# restores a full-page image, so redo reads nothing and leaves the pages in
# the pool.
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->safe_psql('postgres', 'UPDATE items SET v = v + 1');
replay_all($standby, $primary);

# The same pages changed again: no images now, every page needs its old
# contents, and every one is still in shared buffers.
$primary->safe_psql('postgres', 'UPDATE items SET v = v + 1');
replay_all($standby, $primary);
my $s = standby_status($standby, @columns);
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
cmp_ok($s->{last_batch_reads_needed}, '>', 100, 'the second batch needs the old pages');
cmp_ok($s->{last_batch_blocks_cached}, '>=', 0.9 * $s->{last_batch_reads_needed},
	'PREFETCH found them in shared buffers');
cmp_ok($s->{last_batch_prefetch_bytes}, '<', $s->{last_batch_reads_needed} * 8192 / 2,
	'and did not read them again');

# The developer option reads them again.
$standby->append_conf('postgresql.conf', "greenreplica.debug_prefetch_resident = on\n");
$standby->reload;
$primary->safe_psql('postgres', 'UPDATE items SET v = v + 1');
replay_all($standby, $primary);
$s = standby_status($standby, @columns);
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
is($s->{last_batch_blocks_cached}, 0,
	'with debug_prefetch_resident no block is left out');
cmp_ok($s->{last_batch_prefetch_bytes}, '>=', $s->{last_batch_reads_needed} * 8192,
	'and every needed block is read');

is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

done_testing();
