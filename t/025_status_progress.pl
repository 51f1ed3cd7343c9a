# A status view that tells the truth while it matters: during a long FLUSH
# step the view says which step and since when; the volume's state is the
# agent's, with the time of its report; while the volume sleeps the view
# shows whether anything touched it.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my ($primary, $standby, $volume) = pair_on_agent_volume('progress', 2, qq{
greenreplica.rto = 30s
greenreplica.window_size = 64MB
greenreplica.max_apply_delay = 0
greenreplica.debug_flush_delay = 4s
});

ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'sleep' AND volume_state = 'standby'
		    AND volume_state_at > now() - interval '10 s'
		    AND sleep_volume_ios IS NOT NULL AND sleep_volume_spin_ups IS NOT NULL
		   FROM greenreplica_status"),
	"the volume sleeps, as the agent reported moments ago, and the view counts what touches it");

$primary->safe_psql('postgres', 'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 10 = 0');
$primary->wait_for_catchup($standby, 'write');
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
ok(wait_for_phase($standby, 'flush', 60), 'the batch reached FLUSH');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'flush' AND step = 'write-back and sync'
		    AND step_started_at <= now() - interval '1 s'
		   FROM greenreplica_status"),
	'a second into the FLUSH step the view names the step and when it began');
# The write-back publishes its progress: buffers written of the dirty ones
# found (the developer delay holds FLUSH after the writes, before the sleep).
is( $standby->safe_psql(
		'postgres',
		"SELECT step_total > 0 AND step_done = step_total FROM greenreplica_status
		  WHERE phase = 'flush' AND step = 'write-back and sync'"),
	't', 'during FLUSH the view shows the buffers written of the dirty ones found');
is( $standby->safe_psql(
		'postgres',
		"SELECT volume_state NOT IN ('standby', 'spinning_down') FROM greenreplica_status"),
	't', 'during FLUSH the view does not call the volume asleep');

ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND step IS NULL AND batches >= 1 FROM greenreplica_status"),
	'after the batch no step is shown');
is($standby->safe_psql('postgres', 'SELECT wal_receiver FROM greenreplica_status'),
	'streaming', 'the view shows the walreceiver streaming');
cmp_ok($standby->safe_psql('postgres', 'SELECT oldest_unapplied_age_s FROM greenreplica_status'),
	'>=', 0, 'the age of the oldest unapplied WAL is shown');

# The time model the plan rests on is shown: the backlog's reads, the
# per-read time (assumed until measured) and the replay rate.
is( $standby->safe_psql(
		'postgres',
		"SELECT unapplied_reads >= 0 AND read_time_ms > 0 AND read_time_measured IS NOT NULL
		    AND replay_rate > 0
		   FROM greenreplica_status"),
	't', 'the view shows the time model: reads of the backlog, per-read time, replay rate');

# APPLY publishes its progress: the window's WAL bytes replayed, of its total.
$primary->safe_psql('postgres', 'UPDATE pgbench_accounts SET abalance = abalance + 1');
$primary->wait_for_catchup($standby, 'write');
$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
my $session = $standby->background_psql('postgres');
my ($seen_apply, $progress_ok) = (0, 0);
my $deadline = time() + 120;
while (time() < $deadline)
{
	my ($phase, $step, $done, $total) = split /\|/,
	  $session->query_safe(
		"SELECT phase, coalesce(step, ''), coalesce(step_done, -1), coalesce(step_total, -1)
		   FROM greenreplica_status"), -1;
	if ($phase eq 'apply')
	{
		$seen_apply = 1;
		$progress_ok ||= $step eq 'apply' && $total > 0 && $done >= 0 && $done <= $total;
	}
	last if $progress_ok || ($seen_apply && $phase eq 'sleep');
	usleep(2_000);
}
$session->quit;
ok($seen_apply, 'the batch was seen in APPLY');
ok($progress_ok, 'during APPLY the view shows the bytes replayed of the window');

$standby->stop;
remove_agent_volume($volume);
done_testing();
