# Dirty buffers carried across batches (greenreplica.carry_dirty_buffers):
# a batch leaves what it dirtied in shared buffers, and the RTO estimate
# charges their write; a background writer that would write them while the
# volume sleeps (bgwriter_lru_maxpages > 0) makes FLUSH write back instead,
# and the status says why.  Then, with buffers carried and WAL left
# unapplied, the standby is crashed (-m immediate), restarted and promoted:
# it equals the primary and pg_amcheck finds its heaps and indexes clean.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('primary',
	init => { extra => ['--data-checksums'] },
	conf => "checkpoint_timeout = 1h\n");
$primary->safe_psql($_, 'CREATE EXTENSION amcheck') foreach qw(template1 postgres);
$primary->safe_psql('postgres', 'CREATE EXTENSION pg_buffercache');
init_pgbench($primary, 2);

my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = compact
greenreplica.carry_dirty_buffers = on
greenreplica.rto = 300s
shared_buffers = 64MB
bgwriter_lru_maxpages = 0
checkpoint_timeout = 1d
recovery_prefetch = off
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');

# Throttled, so that WAL never arrives faster than the default apply-rate
# estimate (the scheduler would replay continuously, without batches).
sub batch_of
{
	my ($n) = @_;
	$primary->command_ok(
		[
			'pgbench', '-n', '-t', $n, '--rate=300', '-h', $primary->host,
			'-p', $primary->port, 'postgres'
		],
		"$n pgbench transactions on the primary");
	replay_all($standby, $primary);
	return standby_status($standby,
		qw(batches last_batch_buffers_flushed carried_dirty_buffers carried_write_s write_back rto_estimate_s));
}

sub dirty_buffers
{
	return $standby->safe_psql('postgres',
		'SELECT count(*) FROM pg_buffercache WHERE isdirty');
}

my $s = batch_of(300);
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
like($s->{write_back}, qr/dirty buffers carried/, 'the batch carried its dirty buffers');
is($s->{last_batch_buffers_flushed}, 0, 'FLUSH wrote no buffer');
cmp_ok($s->{carried_dirty_buffers}, '>', 0, 'the status counts the carried buffers');
cmp_ok(dirty_buffers(), '>=', $s->{carried_dirty_buffers} * 0.9,
	'pg_buffercache sees them dirty while the standby sleeps');
cmp_ok($s->{carried_write_s}, '>', 0, 'their write is charged');
cmp_ok($s->{rto_estimate_s}, '>=', $s->{carried_write_s},
	'the RTO estimate includes the write of the carried buffers');

my $s2 = batch_of(300);
cmp_ok($s2->{batches}, '>', $s->{batches}, 'another batch ran');
like($s2->{write_back}, qr/dirty buffers carried/, 'and carried again');
cmp_ok($s2->{carried_dirty_buffers}, '>=', $s->{carried_dirty_buffers},
	'the carried buffers accumulate across batches');

# A background writer that writes: carrying is refused, and the status says why.
$standby->append_conf('postgresql.conf', 'bgwriter_lru_maxpages = 100');
$standby->reload;
my $s3 = batch_of(200);
like($s3->{write_back}, qr/written back: bgwriter_lru_maxpages is not 0/,
	'with bgwriter_lru_maxpages > 0 FLUSH writes back and says why');
is($s3->{carried_dirty_buffers}, 0, 'nothing is carried');
cmp_ok($s3->{last_batch_buffers_flushed}, '>', 0, 'FLUSH wrote the buffers');
is(dirty_buffers(), 0, 'no buffer is left dirty while the standby sleeps');

$standby->append_conf('postgresql.conf', 'bgwriter_lru_maxpages = 0');
$standby->reload;
my $s4 = batch_of(300);
like($s4->{write_back}, qr/dirty buffers carried/, 'carrying resumes with the background writer idle');
cmp_ok(dirty_buffers(), '>', 0, 'buffers are dirty when the standby crashes');

# Unapplied WAL on top of the carried buffers when the standby crashes.
$primary->command_ok(
	[ 'pgbench', '-n', '-t', 300, '--rate=300', '-h', $primary->host, '-p', $primary->port, 'postgres' ],
	'more transactions, left unapplied');
$primary->safe_psql('postgres',
	'CREATE TABLE after_crash AS SELECT g AS id FROM generate_series(1, 1000) g');
$primary->wait_for_catchup($standby, 'write', $primary->lsn('insert'));
$standby->stop('immediate');
$standby->start;
promote_crashed_and_compare($primary, $standby, 'a crash with carried buffers');

done_testing();
