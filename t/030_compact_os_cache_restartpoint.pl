# The os_cache read path (greenreplica.prefetch_method = os_cache) across a
# restartpoint and a crash: a window that holds a checkpoint record of the
# primary ends with a restartpoint at the batch end; the next window touches
# the same pages again without full-page images, so its blocks need reads,
# staged in the page cache as merged ranges.  Then WAL is left unapplied,
# the standby is crashed (-m immediate), restarted and promoted: it equals
# the primary and pg_amcheck finds its heaps and indexes clean.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('primary', init => { extra => ['--data-checksums'] });
$primary->safe_psql($_, 'CREATE EXTENSION amcheck') foreach qw(template1 postgres);
init_pgbench($primary, 2);

my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = compact
greenreplica.prefetch_method = os_cache
greenreplica.prefetch_merge_gap = 16
greenreplica.rto = 60s
greenreplica.window_size = 256MB
shared_buffers = 16MB
bgwriter_lru_maxpages = 0
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');
is($standby->safe_psql('postgres', 'SHOW greenreplica.prefetch_method'),
	'os_cache', 'PREFETCH reads through the OS page cache');
ok($standby->log_contains(qr/WARNING:  greenreplica: recovery_prefetch is on on a compacting standby/),
	"a compacting standby with PostgreSQL's recovery prefetcher on is warned about");

# greenreplica cannot turn the prefetcher off itself: a reload that turns it
# back on is warned about again.
sub prefetch_warnings
{
	my @w = slurp_file($standby->logfile) =~
	  /WARNING:  greenreplica: recovery_prefetch is on on a compacting standby/g;
	return scalar @w;
}
my $warnings = prefetch_warnings();
$standby->append_conf('postgresql.conf', "recovery_prefetch = off\n");
$standby->reload;
sleep 1;    # the scheduler reloads within its 100 ms tick
$standby->append_conf('postgresql.conf', "recovery_prefetch = try\n");
$standby->reload;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
sleep 1 while prefetch_warnings() == $warnings && time() < $deadline;
is(prefetch_warnings(), $warnings + 1,
	'a reload that turns the recovery prefetcher back on is warned about again');

# Throttled, so that WAL never arrives faster than the default apply-rate
# estimate (the scheduler would replay continuously, without batches), and
# then batching is awaited again.
sub pgbench_transactions
{
	my ($n) = @_;
	$primary->command_ok(
		[
			'pgbench', '-n', '-t', $n, '--rate=300', '-h', $primary->host,
			'-p', $primary->port, 'postgres'
		],
		"$n pgbench transactions on the primary");
	ok( $standby->poll_query_until(
			'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
		'the standby batches');
	return;
}

# One window with a checkpoint record in its middle.
my $redo_before = $standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
pgbench_transactions(1000);
$primary->safe_psql('postgres', 'CHECKPOINT');
my $checkpoint_lsn = $primary->lsn('insert');
pgbench_transactions(1000);
replay_all($standby, $primary);
my $redo_after = $standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
ok( $standby->safe_psql('postgres',
		"SELECT '$redo_after'::pg_lsn > '$redo_before'::pg_lsn AND '$redo_after'::pg_lsn < '$checkpoint_lsn'::pg_lsn"),
	"the batch that replayed the window's checkpoint took a restartpoint there ($redo_before -> $redo_after)");

# The next window updates pages changed since that checkpoint: no images,
# so its blocks need reads, and os_cache issues them.
my $before = standby_status($standby, qw(batches total_prefetch_ios total_prefetch_bytes));
pgbench_transactions(2000);
replay_all($standby, $primary);
my $after = standby_status($standby,
	qw(batches total_prefetch_ios total_prefetch_bytes last_batch_reads_needed window_splits));
note(join(', ', map { "$_=$after->{$_}" } sort keys %$after));
cmp_ok($after->{batches}, '>', $before->{batches}, 'the window was replayed in a batch');
cmp_ok($after->{total_prefetch_ios}, '>', $before->{total_prefetch_ios},
	'the window needed reads and os_cache issued them');
cmp_ok(
	$after->{total_prefetch_bytes} - $before->{total_prefetch_bytes},
	'>=', 8192 * ($after->{total_prefetch_ios} - $before->{total_prefetch_ios}),
	'each prefetch I/O is a range of whole blocks');
is($after->{window_splits}, 0,
	'a window whose reads exceed a quarter of shared_buffers does not split with os_cache');
ok($standby->log_contains(qr/batch applied \d+ bytes of WAL: wake [\d.]+ s, prefetch [\d.]+ s, apply [\d.]+ s, flush [\d.]+ s/),
	"each batch logs where its time went");

# Unapplied WAL when the standby crashes.
pgbench_transactions(1000);
$primary->safe_psql('postgres',
	'CREATE TABLE after_crash AS SELECT g AS id FROM generate_series(1, 1000) g');
$primary->wait_for_catchup($standby, 'write', $primary->lsn('insert'));
ok(!$standby->log_contains(qr/bgwriter_lru_maxpages is/),
	'no bgwriter warning while bgwriter_lru_maxpages = 0');
$standby->stop('immediate');
# restarted with the background writer's default: the scheduler warns
$standby->append_conf('postgresql.conf', 'bgwriter_lru_maxpages = 100');
$standby->start;
ok( $standby->wait_for_log(qr/WARNING:  greenreplica: bgwriter_lru_maxpages is 100 on a batching standby/),
	'a batching standby whose background writer trickles buffers out is warned about');
promote_crashed_and_compare($primary, $standby, 'a crash');

done_testing();
