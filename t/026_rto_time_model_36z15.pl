# The RTO holds when applying the backlog is dominated by block reads: on the
# paper's drive (ultrastar-36z15, spin-up 26 s), a table four times
# shared_buffers is updated at random in mid checkpoint cycle (every update
# needs a read, none brings a full-page image), its files kept out of the
# page cache as for a database much larger than memory.  A standby is
# promoted at the peak backlog of its first cycle (the per-read time not yet
# measured) and another at the peak of a later cycle (measured): the promote
# to the first committed write takes at most greenreplica.rto each time, and
# the promoted standby holds the primary's data.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $rto = 60;
my $rows = 240_000;    # about 64 MB at fillfactor 50: 4 x shared_buffers
my $updates_per_s = 40;

# No checkpoint on the primary during the test: no full-page images.
my ($volume_a, $mount_a) = agent_volume('rtotime_a', 'tap-36z15');
my $primary = new_primary('rtotime_primary', conf => qq{
shared_buffers = 16MB
checkpoint_timeout = 1h
max_wal_size = 4GB
});
my $tablespace = PostgreSQL::Test::Utils::tempdir('rtotime_ts');
$primary->safe_psql('postgres', "CREATE TABLESPACE data LOCATION '$tablespace'");
$primary->safe_psql(
	'postgres', qq{
CREATE TABLE t (id int PRIMARY KEY USING INDEX TABLESPACE data, v int, pad text)
  WITH (fillfactor = 50, autovacuum_enabled = false) TABLESPACE data;
INSERT INTO t SELECT i, 0, repeat('x', 100) FROM generate_series(1, $rows) i;
VACUUM ANALYZE t;
});
my $table_file = $primary->safe_psql('postgres', "SELECT pg_relation_filepath('t')");

my $standby_conf = qq{
greenreplica.rto = ${rto}s
greenreplica.max_apply_delay = 120s
shared_buffers = 16MB
};

# A standby that replays freely while every block of the table gets its
# full-page image (a whole-table HOT update after the base backup's
# checkpoint), then restarts batching (a scheduler that has not seen that
# burst of WAL): its windows hold updates of blocks it must read.
sub start_batching_standby
{
	my ($name, $volume, $mount) = @_;
	my $standby = new_standby_on_volume($primary, $name, $tablespace, $mount, qq{
greenreplica.mode = off
greenreplica.agent_socket = '$ENV{GR_AGENT_SOCKET}'
greenreplica.agent_volume = '$volume'
$standby_conf
});
	$primary->safe_psql('postgres', 'UPDATE t SET v = v + 1');
	$primary->safe_psql('postgres', 'VACUUM t');
	$primary->wait_for_catchup($standby, 'replay');
	$standby->append_conf('postgresql.conf', 'greenreplica.mode = defer');
	$standby->restart;
	ok( $standby->poll_query_until(
			'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
		"$name batches with the agent");
	return $standby;
}

# The table's files on the standby's volume, out of the page cache.
sub drop_page_cache
{
	my ($standby) = @_;
	my $oid_path = $standby->safe_psql('postgres', "SELECT pg_relation_filepath('t')");
	my $dir = $standby->data_dir . '/' . ($oid_path =~ s{/[^/]+$}{}r);
	my $base = ($oid_path =~ m{([^/]+)$})[0];
	foreach my $file (glob("$dir/$base $dir/$base.*"))
	{
		system('dd', "if=$file", 'iflag=nocache', 'count=0', 'status=none');
	}
	return;
}

# Random single-row updates at a steady rate until a batch starts after
# $batches_before batches: the peak of the backlog, seen as the phase moving
# from SLEEP to the batch's first phase.  Returns whether it was seen.
sub update_until_batch_starts
{
	my ($standby, $batches_before, $seconds) = @_;
	my $writer = $primary->background_psql('postgres', timeout => $seconds + 60);
	my $watcher = $standby->background_psql('postgres', timeout => $seconds + 60);
	my $deadline = Time::HiRes::time() + $seconds;
	my $last_drop = 0;
	my $seen = 0;
	my $was_asleep = 0;
	while (!$seen && Time::HiRes::time() < $deadline)
	{
		my $at = Time::HiRes::time();
		$writer->query_safe('UPDATE t SET v = v + 1 WHERE id = ' . (1 + int(rand($rows))));
		if ($at - $last_drop >= 1)
		{
			drop_page_cache($standby);
			$last_drop = $at;
		}
		my ($phase, $batches) = split /\|/,
		  $watcher->query_safe('SELECT phase, batches FROM greenreplica_status');
		$seen = $was_asleep && $batches >= $batches_before
		  && ($phase eq 'wake' || $phase eq 'prefetch' || $phase eq 'apply');
		$was_asleep = $phase eq 'sleep';
		my $rest = 1 / $updates_per_s - (Time::HiRes::time() - $at);
		usleep($rest * 1e6) if $rest > 0;
	}
	$writer->quit;
	$watcher->quit;
	return $seen;
}

# Promote at the batch start and compare with the primary.
sub promote_at_peak
{
	my ($standby, $cycle) = @_;
	my $status = standby_status($standby, 'phase', 'batches', 'unapplied_bytes', 'rto_estimate_s', 'r_gen');
	diag("$cycle: promoting in $status->{phase} after $status->{batches} batches with "
		  . "$status->{unapplied_bytes} bytes unapplied (WAL at $status->{r_gen} bytes/s), "
		  . "estimate $status->{rto_estimate_s} s");
	$primary->wait_for_catchup($standby, 'write');
	drop_page_cache($standby);
	my $took = promote_and_time_first_write($standby);
	ok(defined $took, "$cycle: the promoted standby took a write");
	cmp_ok($took // 1e9, '<=', $rto,
		sprintf('%s: promote to first committed write took %.2f s, within the RTO of %d s',
			$cycle, $took // -1, $rto));
	$standby->safe_psql('postgres', 'DROP TABLE first_write');
	is_deeply(table_fingerprints($standby), table_fingerprints($primary),
		"$cycle: the promoted standby holds the primary's data");
	$standby->stop;
	return;
}

my $first = start_batching_standby('rtotime_first', $volume_a, $mount_a);
ok(update_until_batch_starts($first, 0, 600), 'the first cycle of the first standby ends in a batch');
promote_at_peak($first, 'first cycle');
remove_agent_volume($volume_a);

my ($volume_b, $mount_b) = agent_volume('rtotime_b', 'tap-36z15');
my $later = start_batching_standby('rtotime_later', $volume_b, $mount_b);
ok(update_until_batch_starts($later, 1, 600), 'the second standby reached the start of its second batch');
promote_at_peak($later, 'later cycle');
remove_agent_volume($volume_b);

$primary->stop;
done_testing();
