# A window split at its read bound (the prefetch's memory: shared_buffers / 4
# reads, at least 16) whose reads are all cached is woken write-only, and the
# batch ends at the split; the rest of the WAL is the next batch's.  Before,
# a split window was always woken plain ("not decoded whole"): in
# bench/energy's compact_qmd every 16 MB window past 4,096 reads woke both
# disks of a QMD pair although every read was cached.
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
END { kill 'KILL', $agent if $agent; }

# Without full-page images, an update of an existing page needs its read.
my $primary = new_primary('primary', conf => "full_page_writes = off\nautovacuum = off\n");
init_pgbench($primary, 2);
$primary->safe_psql('postgres', 'VACUUM');
$primary->safe_psql('postgres', 'CHECKPOINT');
# 32 buffers: a window holds at most 16 reads, so the updates below split it.
my $standby = new_standby(
	$primary, 'standby', qq{
shared_buffers = 256kB
greenreplica.mode = compact
greenreplica.rto = 20s
greenreplica.window_size = 4MB
greenreplica.agent_socket = '$socket'
greenreplica.agent_volume = 'data'
});

sub wakes_since
{
	my ($from) = @_;
	my @reqs = FakeAgent::request_objects($log);
	return grep { ($_->{op} // '') eq 'wake' } @reqs[ $from .. $#reqs ];
}

sub write_only_batches
{
	my ($ret, $out, $err) = $standby->psql('postgres',
		'SELECT write_only_batches FROM greenreplica_status');
	return $ret == 0 ? $out : "error: $err";
}

ok(wait_until_asleep($standby), 'the standby batches and the volume sleeps');
replay_all($standby, $primary);
ok(wait_until_asleep($standby), 'caught up, the volume sleeps again');

# Read every accounts page once on the standby: all in the OS page cache.
$standby->safe_psql('postgres', 'SELECT count(*) FROM pgbench_accounts');
ok(wait_until_asleep($standby), 'the volume sleeps after the scan');
my $write_only_before = write_only_batches();
like($write_only_before, qr/^[0-9]+$/, 'the status counts write-only batches');

# About 100 accounts pages updated, each needing its read: more than 16.
my $mark = () = FakeAgent::request_objects($log);
$primary->safe_psql('postgres',
	'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 2000 = 0');
replay_all($standby, $primary);
my @wakes = wakes_since($mark);
diag(scalar(@wakes) . ' wakes for the updates');
ok(@wakes >= 1, 'the batch of updates woke the volume');
ok(@wakes && $wakes[0]{writes_only},
	'a split window whose reads are all cached gets a write-only wake')
  or diag(explain($wakes[0]));
cmp_ok(write_only_batches(), '>', $write_only_before,
	'the status counts it write-only');

is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'the standby equals the primary');

$standby->stop;
kill 'KILL', $agent;
waitpid($agent, 0);
$agent = undef;
done_testing();
