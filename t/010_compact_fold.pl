# Eager compaction under load: a standby in mode "compact" decodes each
# window before replaying it and shows the fold in greenreplica_status:
# fewer distinct blocks than block references, and reads avoided once a
# checkpoint on the primary makes the next references full-page images.
# After a final batch the standby equals the primary.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $primary = new_primary('primary');
init_pgbench($primary, 2);

my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = compact
greenreplica.rto = 20s
greenreplica.window_size = 4MB
shared_buffers = 32MB
});

ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the scheduler pauses replay between batches');

# Load, with checkpoints on the primary during it: the first change of each
# block after a checkpoint carries a full-page image.
my $load = start_pgbench($primary, 15);
while ($load->pumpable)
{
	$primary->safe_psql('postgres', 'CHECKPOINT') if int(rand(10)) == 0;
	usleep(100_000);
	$load->pump_nb;
}
ok($load->finish, 'pgbench ran');
replay_all($standby, $primary);

my @figures = qw(batches total_block_refs total_distinct_blocks total_reads_avoided);
my $before = standby_status($standby, @figures);
cmp_ok($before->{batches}, '>=', 2, 'replay ran in batches');
cmp_ok($before->{total_distinct_blocks}, '<', $before->{total_block_refs},
	'under load: fewer distinct blocks than block references');

# Unthrottled pgbench can outrun the apply rate and turn replay continuous
# (no batches, so no fold figures) until the WAL rate's average decays:
# wait for batching to resume before the next step.
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches again after the load');

# Windows that surely hold a checkpoint and the images after it: every
# transaction updates the one page of pgbench_branches, and the first
# change of each page after the checkpoint carries a full-page image.
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->command_ok(
	[ 'pgbench', '-n', '-t', '200', '-h', $primary->host, '-p', $primary->port, 'postgres' ],
	'more transactions after a checkpoint');
replay_all($standby, $primary);

my $s = standby_status(
	$standby, @figures, qw(mode last_batch_windows last_batch_decoded_records
	  last_batch_block_refs last_batch_distinct_blocks last_batch_reads_needed
	  last_batch_reads_avoided last_batch_fold_ratio last_batch_decode_seconds
	  last_batch_bytes_per_block last_batch_bytes total_prefetch_ios));
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));

is($s->{mode}, 'compact', 'the standby compacts');
cmp_ok($s->{batches}, '>', $before->{batches}, 'the new WAL was replayed in batches');
my %delta = map { $_ => $s->{$_} - $before->{$_} } @figures;
cmp_ok($delta{total_distinct_blocks}, '<', $delta{total_block_refs},
	'those windows folded: fewer distinct blocks than block references');
cmp_ok($delta{total_reads_avoided}, '>', 0,
	'reads avoided after a checkpoint on the primary (full-page images first)');

# The last batch's figures are consistent, whatever it held.
cmp_ok($s->{last_batch_windows}, '>=', 1, 'the last batch was decoded as a window');
cmp_ok($s->{last_batch_distinct_blocks}, '<=', $s->{last_batch_block_refs},
	'no more distinct blocks than block references');
is($s->{last_batch_reads_needed} + $s->{last_batch_reads_avoided},
	$s->{last_batch_distinct_blocks},
	'every distinct block is either read once or needs no read');
cmp_ok($s->{last_batch_decode_seconds}, '>=', 0, 'the decode time is reported');

is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'after a final batch the standby equals the primary');

done_testing();
