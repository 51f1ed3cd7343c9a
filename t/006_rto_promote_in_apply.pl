# RTO kept: promote while the scheduler is in its APPLY phase, with a
# large batch under way.  The promoted standby takes its first write within
# greenreplica.rto.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rto = 10;
my $primary = new_primary('primary');
$primary->command_ok(
	[ 'pgbench', '-i', '-s', '5', '-q', '-h', $primary->host, '-p', $primary->port, 'postgres' ],
	'pgbench tables loaded');
my $standby = new_standby(
	$primary, 'standby', qq{
greenreplica.mode = defer
greenreplica.rto = ${rto}s
greenreplica.window_size = 48MB
shared_buffers = 256MB
});
ok($standby->poll_query_until('postgres', "SELECT phase = 'sleep' FROM greenreplica_status"),
	'the standby batches');

my $load = start_pgbench($primary, 120);
ok(wait_for_phase($standby, 'apply', 60), 'the scheduler entered APPLY under load');

my $took = promote_and_time_first_write($standby);
$load->kill_kill;
ok(defined $took, 'the promoted standby took a write');
cmp_ok($took, '<=', $rto,
	sprintf('promote during APPLY to first committed write took %.2f s, within the RTO of %d s', $took // -1, $rto));
is($standby->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
	'primary', 'the standby is a primary now');

done_testing();
