# The RTO holds when the backlog's cost is cold reads, not bytes: on the
# paper's drive (ultrastar-36z15, spin-up 26 s), a table ten times the
# standby's shared_buffers gets single-row updates on thousands of distinct
# pages in mid checkpoint cycle.  Every page already carries its full-page
# image from before the standby started deferring, so each update's record
# is a hundred bytes that needs one read of its page at apply; the table's
# files are kept out of the OS page cache (as for a database much larger
# than memory) and recovery_prefetch is off, so each read is a random access
# of the drive.  A model in bytes per second sees a few MB (well under a
# second of apply) and lets the reads pile up; the promote to the first
# committed write must still take at most greenreplica.rto, and the promoted
# standby holds the primary's data.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $rto = 60;
my $pages = 21_000;       # about 165 MB: ten times the standby's shared_buffers
my $updates = 20_000;     # one per distinct page, in random page order
my $updates_per_s = 200;

# No checkpoint on the primary during the test: after the one the base
# backup takes, the first change of a page carries its image, later ones
# do not.
my ($volume, $mount) = agent_volume('coldreads', 'tap-36z15');
my $primary = new_primary('coldreads_primary', conf => qq{
checkpoint_timeout = 1h
max_wal_size = 4GB
});
my $tablespace = PostgreSQL::Test::Utils::tempdir('coldreads_ts');
$primary->safe_psql('postgres', "CREATE TABLESPACE data LOCATION '$tablespace'");
# Three rows of about 1 kB per page at fillfactor 50: a row's update stays
# on its page (HOT), and its record logs only the changed bytes.
$primary->safe_psql(
	'postgres', qq{
CREATE TABLE t (id int PRIMARY KEY USING INDEX TABLESPACE data, v int, pad text)
  WITH (fillfactor = 50, autovacuum_enabled = false) TABLESPACE data;
INSERT INTO t SELECT i, 0, repeat('x', 1000) FROM generate_series(1, 3 * $pages) i;
VACUUM ANALYZE t;
});

# The standby replays freely while every page of the table gets its
# full-page image (a whole-table update after the base backup's
# checkpoint), then restarts deferring: its backlog from then on holds only
# updates of pages it must read.
my $standby = new_standby_on_volume($primary, 'coldreads_standby', $tablespace, $mount, qq{
greenreplica.mode = off
greenreplica.agent_socket = '$ENV{GR_AGENT_SOCKET}'
greenreplica.agent_volume = '$volume'
greenreplica.rto = ${rto}s
greenreplica.max_apply_delay = 600s
shared_buffers = 16MB
recovery_prefetch = off
bgwriter_lru_maxpages = 0
});
$primary->safe_psql('postgres', 'UPDATE t SET v = v + 1');
$primary->safe_psql('postgres', 'VACUUM t');
$primary->wait_for_catchup($standby, 'replay');
$standby->append_conf('postgresql.conf', 'greenreplica.mode = defer');
$standby->restart;
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
	'the standby defers replay with the agent');

# The table's and its index's files on the standby's volume, out of the
# OS page cache (dd asks the kernel to drop the whole file's clean pages).
sub drop_page_cache
{
	foreach my $rel ('t', 't_pkey')
	{
		my $path = $standby->safe_psql('postgres', "SELECT pg_relation_filepath('$rel')");
		my $file = $standby->data_dir . "/$path";
		foreach my $segment (glob("$file $file.*"))
		{
			system('dd', "if=$segment", 'iflag=nocache', 'count=0', 'status=none');
		}
	}
	return;
}

# Seconds from the promote request to the first committed write, without
# pg_ctl's own wait (60 s) cutting a slow promotion short: the measured time
# is what the test reports, however long.
sub promote_nowait_and_time_first_write
{
	my $start = Time::HiRes::time();
	$standby->safe_psql('postgres', 'SELECT pg_promote(wait => false)');
	my $deadline = $start + 3 * $PostgreSQL::Test::Utils::timeout_default;
	while (Time::HiRes::time() < $deadline)
	{
		my ($ret) = $standby->psql('postgres',
			'CREATE TABLE IF NOT EXISTS first_write (at timestamptz); INSERT INTO first_write VALUES (now())');
		return Time::HiRes::time() - $start if $ret == 0;
		usleep(10_000);
	}
	return undef;
}

# One row of each of $updates pages, in random order, at a steady rate.
my ($out, $err) = ('', '');
my $writer = IPC::Run::start(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		'-h', $primary->host, '-p', $primary->port, 'postgres',
		'-c', qq{
DO \$\$
DECLARE
  r record;
  n int := 0;
BEGIN
  FOR r IN SELECT min(id) AS id FROM t GROUP BY (ctid::text::point)[0]
           ORDER BY random() LIMIT $updates
  LOOP
    UPDATE t SET v = v + 1 WHERE id = r.id;
    n := n + 1;
    IF n % ($updates_per_s / 10) = 0 THEN
      COMMIT;
      PERFORM pg_sleep(0.1);
    END IF;
  END LOOP;
END
\$\$}
	],
	'>', \$out, '2>', \$err);
while ($writer->pumpable)
{
	drop_page_cache();
	sleep 2;
	$writer->pump_nb;
}
ok($writer->finish, "$updates single-row updates on distinct pages committed on the primary")
  or diag($err);

my $status = standby_status($standby, 'phase', 'batches', 'unapplied_bytes', 'rto_estimate_s');
diag("promoting in $status->{phase} after $status->{batches} batches with "
	  . "$status->{unapplied_bytes} bytes unapplied, estimate $status->{rto_estimate_s} s");
$primary->wait_for_catchup($standby, 'write');
drop_page_cache();
my $took = promote_nowait_and_time_first_write($standby);
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took // 1e9, '<=', $rto,
	sprintf('promote to first committed write took %.2f s, within the RTO of %d s',
		$took // -1, $rto));
$standby->safe_psql('postgres', 'DROP TABLE first_write');
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	"the promoted standby holds the primary's data");

$standby->stop;
remove_agent_volume($volume);
$primary->stop;
done_testing();
