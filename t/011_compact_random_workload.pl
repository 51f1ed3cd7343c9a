# Eager compaction is never trusted for correctness: under a randomized
# workload that creates, extends, truncates and drops relations (and a
# whole database) inside the windows it decodes and prefetches, a standby
# in mode "compact" with data checksums ends up equal to the primary, with
# clean heaps and indexes, before and after promotion.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = $ENV{GR_TEST_SEED} // int(rand(1_000_000));
note("random seed $seed (set GR_TEST_SEED to repeat)");
srand($seed);

my $primary = new_primary('primary', init => { extra => ['--data-checksums'] });
is($primary->safe_psql('postgres', 'SHOW data_checksums'), 'on', 'data checksums are on');
# In template1 too, so that every database pg_amcheck visits has it.
$primary->safe_psql($_, 'CREATE EXTENSION amcheck') foreach qw(template1 postgres);
init_pgbench($primary, 2);

# A small buffer pool makes windows split for memory, too.
my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = compact
greenreplica.rto = 20s
greenreplica.window_size = 2MB
shared_buffers = 4MB
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');

# A file for large COPYs.
my $copy_file = PostgreSQL::Test::Utils::tempdir() . '/copy.tsv';
open(my $fh, '>', $copy_file) or die "open $copy_file: $!";
print $fh "$_\trow $_ " . ('x' x 60) . "\n" for 1 .. 100_000;
close $fh;

my $load = start_pgbench($primary, 60);
my @tables;
my $next_table = 0;
my %done;

sub new_table
{
	my $t = 'rt_' . $next_table++;
	$primary->safe_psql('postgres',
		"CREATE TABLE $t (id int PRIMARY KEY, v text); "
		  . "INSERT INTO $t SELECT g, 'v' || g FROM generate_series(1, "
		  . (1 + int(rand(20_000))) . ") g");
	push @tables, $t;
	return $t;
}

sub any_table { return @tables ? $tables[ int(rand(@tables)) ] : new_table(); }

my @ops = (
	create => sub { new_table() },
	drop => sub {
		return unless @tables;
		my $t = splice(@tables, int(rand(@tables)), 1);
		$primary->safe_psql('postgres', "DROP TABLE $t");
	},
	truncate => sub {
		my $t = any_table();
		$primary->safe_psql('postgres',
			"TRUNCATE $t; INSERT INTO $t SELECT g, 't' || g FROM generate_series(1, 500) g");
	},
	vacuum => sub { $primary->safe_psql('postgres', 'VACUUM ' . any_table() . ', pgbench_accounts') },
	index => sub {
		my $t = any_table();
		$primary->safe_psql('postgres', "CREATE INDEX ON $t (v)");
	},
	copy => sub {
		my $t = any_table();
		$primary->safe_psql('postgres',
			"CREATE TEMP TABLE c (id int, v text); COPY c FROM '$copy_file'; "
			  . "INSERT INTO $t SELECT id + 1000000, v FROM c ON CONFLICT DO NOTHING");
	},
	extend_truncate => sub {
		my $t = any_table();
		$primary->safe_psql('postgres',
			"INSERT INTO $t SELECT g, repeat('e', 200) FROM generate_series(2000001, 2030000) g "
			  . "ON CONFLICT DO NOTHING");
		$primary->safe_psql('postgres', "DELETE FROM $t WHERE id > 2000000");
		$primary->safe_psql('postgres', "VACUUM $t");
	},
	update => sub {
		my $t = any_table();
		$primary->safe_psql('postgres', "UPDATE $t SET v = v || 'u' WHERE id % 7 = " . int(rand(7)));
	},
	database => sub {
		# created and dropped within one window: replay is held meanwhile
		$primary->safe_psql('postgres', 'CREATE DATABASE scratch');
		$primary->safe_psql('scratch',
			'CREATE TABLE s AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 20000) g; '
			  . 'CREATE INDEX ON s (v)');
		$primary->safe_psql('postgres', 'DROP DATABASE scratch');
	},
	checkpoint => sub { $primary->safe_psql('postgres', 'CHECKPOINT') },
	batch => sub { $standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()') },
);
my %op = @ops;
my @names = grep { !ref } @ops;

new_table() for 1 .. 3;
my $steps = 0;
while ($load->pumpable)
{
	my $name = $names[ int(rand(@names)) ];
	$op{$name}->();
	$done{$name}++;
	$steps++;
	usleep(50_000);
	$load->pump_nb;
}
ok($load->finish, 'pgbench ran');
note('operations: ' . join(', ', map { "$_=$done{$_}" } sort keys %done));
# Make sure each kind of operation ran at least once.
foreach my $name (@names)
{
	$op{$name}->() unless $done{$name};
}
cmp_ok($steps, '>', 20, "the random workload ran ($steps operations)");

replay_all($standby, $primary);
my $s = standby_status($standby,
	qw(batches total_block_refs total_distinct_blocks total_reads_avoided window_splits));
note(join(', ', map { "$_=$s->{$_}" } sort keys %$s));
cmp_ok($s->{batches}, '>=', 2, 'the standby replayed in batches');
cmp_ok($s->{total_distinct_blocks}, '>', 0, 'the windows were decoded and folded');
cmp_ok($s->{total_distinct_blocks}, '<', $s->{total_block_refs}, 'the windows folded');

my $primary_fp = table_fingerprints($primary);
is_deeply(table_fingerprints($standby), $primary_fp,
	'after the final batch the standby equals the primary');

amcheck_clean($standby, 'on the standby');

my $took = promote_and_time_first_write($standby);
ok(defined $took, 'the standby was promoted and took a write');
$standby->safe_psql('postgres', 'DROP TABLE first_write');
is_deeply(table_fingerprints($standby), $primary_fp, 'after promotion it still equals the primary');
amcheck_clean($standby, 'after promotion');

done_testing();
