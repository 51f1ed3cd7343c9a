# Write-only windows (issue 16): a compacting standby decodes its window
# before it wakes the sleeping volume.  A window that reads nothing from the
# volume (here: rows inserted into fresh pages, each page's first reference
# an init) is woken with "writes_only" and the extents it writes, so a layout
# with a flash buffer can keep its disks asleep; a window that must read
# blocks neither in shared buffers nor in the OS page cache gets a plain
# wake.  The status counts the write-only batches.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use FakeAgent;
use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $socket = "$PostgreSQL::Test::Utils::tmp_check/agent.sock";
my $log = "$PostgreSQL::Test::Utils::tmp_check/agent.log";
my $agent = FakeAgent::start(socket => $socket, log => $log);
# The fake agent is a child process: stop it however the test ends.
END { kill 'KILL', $agent if $agent; }

# Without full-page images, an update of an existing page needs its read.
my $primary = new_primary('primary', conf => "full_page_writes = off\nautovacuum = off\n");
init_pgbench($primary, 2);
$primary->safe_psql('postgres', 'CREATE TABLE fresh (id int, pad text)');
# No prunable tuple left in any table or catalog before the base backup.  The
# window of inserts below needed 3 reads besides its fresh pages (DEBUG1 run)
# and in 3 of 5 runs on the merged tree one of them was in no cache, so the
# batch was rightly woken plain; prunes of catalog pages logged by the
# primary's own catalog scans are the likely source.  With the VACUUM 2 of 2
# runs passed.
$primary->safe_psql('postgres', 'VACUUM');
$primary->safe_psql('postgres', 'CHECKPOINT');
my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = compact
greenreplica.rto = 20s
greenreplica.window_size = 4MB
greenreplica.agent_socket = '$socket'
greenreplica.agent_volume = 'data'
});

# The wakes sent since request number $from.
sub wakes_since
{
	my ($from) = @_;
	my @reqs = FakeAgent::request_objects($log);
	return grep { ($_->{op} // '') eq 'wake' } @reqs[ $from .. $#reqs ];
}

# The status's count, or a note of why there is none.
sub write_only_batches
{
	my ($ret, $out, $err) = $standby->psql('postgres',
		'SELECT write_only_batches FROM greenreplica_status');
	return $ret == 0 ? $out : "error: $err";
}

ok(wait_until_asleep($standby), 'the standby batches and the volume sleeps');
replay_all($standby, $primary);
ok(wait_until_asleep($standby), 'caught up, the volume sleeps again');
my $write_only_before = write_only_batches();
like($write_only_before, qr/^[0-9]+$/, 'the status counts write-only batches');

# A window of inserts into fresh pages: every page starts from an init.
my $mark = () = FakeAgent::request_objects($log);
$primary->safe_psql('postgres',
	"INSERT INTO fresh SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g");
replay_all($standby, $primary);
my @wakes = wakes_since($mark);
ok(@wakes >= 1, 'the batch of inserts woke the volume');
ok($wakes[0]{writes_only}, 'a window that only writes gets a write-only wake')
  or diag(explain($wakes[0]));
is(ref($wakes[0]{extents}), 'ARRAY', 'with the extents it writes');
is(write_only_batches(), $write_only_before + 1, 'the status counts the write-only batch');
ok(wait_until_asleep($standby), 'the volume sleeps after the batch');

# A window that needs reads of blocks the standby has in no cache: pgbench's
# accounts, never read since the base backup, dropped from the page cache.
my $path = $standby->data_dir . '/'
  . $standby->safe_psql('postgres', "SELECT pg_relation_filepath('pgbench_accounts')");
system('sync', $path) == 0 or die "sync $path: $?";
system('dd', "if=$path", 'iflag=nocache', 'count=0', 'status=none') == 0
  or die "dd nocache $path: $?";
$mark = () = FakeAgent::request_objects($log);
$primary->safe_psql('postgres',
	'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 500 = 0');
replay_all($standby, $primary);
@wakes = wakes_since($mark);
ok(@wakes >= 1, 'the batch of updates woke the volume');
ok(!$wakes[0]{writes_only}, 'a window that reads uncached blocks gets a plain wake')
  or diag(explain($wakes[0]));
is(write_only_batches(), $write_only_before + 1, 'and is not counted write-only');

is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

$standby->stop;
kill 'KILL', $agent;
waitpid($agent, 0);
$agent = undef;
done_testing();
