# Under a steady write load, a standby in mode "defer" replays in batches:
# WAL is received continuously, replay advances in steps, the estimated
# failover time stays within the RTO, and after a final batch the standby
# equals the primary.
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

my $rto = 20;
my $primary = new_primary('primary');
init_pgbench($primary, 2);

my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = defer
greenreplica.rto = ${rto}s
greenreplica.window_size = 2MB
});

ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the scheduler pauses replay between batches');

my ($out, $err) = ('', '');
my $load = IPC::Run::start(
	[
		'pgbench', '-n', '-T', '20', '-c', '2', '-h', $primary->host,
		'-p', $primary->port, 'postgres'
	],
	'>', \$out, '2>', \$err);

# Sample the standby while the load runs.
my ($samples, $paused_with_backlog, $worst_estimate) = (0, 0, 0);
my %replay_positions;
while ($load->pumpable)
{
	my $s = standby_status($standby, 'phase', 'unapplied_bytes', 'rto_estimate_s');
	$samples++;
	$paused_with_backlog++
	  if $s->{phase} eq 'sleep' && $s->{unapplied_bytes} > 0;
	$worst_estimate = $s->{rto_estimate_s}
	  if $s->{rto_estimate_s} ne '' && $s->{rto_estimate_s} > $worst_estimate;
	$replay_positions{ $standby->safe_psql('postgres', 'SELECT pg_last_wal_replay_lsn()') } = 1;
	usleep(100_000);
	$load->pump_nb;
}
ok($load->finish, 'pgbench ran') or diag($err);

cmp_ok($samples, '>', 20, 'the standby was sampled during the load');
cmp_ok($paused_with_backlog, '>', 0,
	'replay was paused while received WAL waited for its batch');
cmp_ok(scalar(keys %replay_positions), '>', 1, 'replay advanced during the load');
my $batches = standby_status($standby, 'batches')->{batches};
cmp_ok($batches, '>=', 2, "replay ran in batches ($batches)");
cmp_ok($worst_estimate, '<=', $rto,
	"the estimated failover time stayed within the RTO (worst $worst_estimate s)");

my $s = standby_status($standby, 'r_gen', 'r_apl_measured', 'last_batch_bytes', 'last_batch_records');
cmp_ok($s->{r_gen}, '>', 0, 'the WAL generation rate is measured');
is($s->{r_apl_measured}, 't', 'the apply rate is measured from batches');
cmp_ok($s->{last_batch_records}, '>', 0, 'the last batch replayed records');

replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'after a final batch the standby equals the primary');

done_testing();
