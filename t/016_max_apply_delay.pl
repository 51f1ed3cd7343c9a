# A bound on staleness: with a trickle of WAL the RTO-based plan would hold
# replay back for hours (the backlog never reaches its threshold), but
# greenreplica.max_apply_delay starts a batch once the oldest unapplied WAL
# is that old, and the standby catches up without anyone asking.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = new_primary('delay_primary');
my $standby = new_standby($primary, 'delay_standby', qq{
greenreplica.mode = compact
greenreplica.rto = 1h
greenreplica.max_apply_delay = 3s
});
ok( $standby->poll_query_until(
		'postgres', "SELECT phase = 'sleep' AND max_unapplied_bytes > 0 FROM greenreplica_status"),
	'the standby batches');
my $batches = $standby->safe_psql('postgres', 'SELECT batches FROM greenreplica_status');

$primary->safe_psql('postgres', 'CREATE TABLE trickle (id int); INSERT INTO trickle VALUES (1)');
my $target = $primary->lsn('insert');
$primary->wait_for_catchup($standby, 'write', $target);
my $s = standby_status($standby, 'max_unapplied_bytes', 'unapplied_bytes');
cmp_ok($s->{unapplied_bytes}, '<', $s->{max_unapplied_bytes} / 100,
	'the backlog is far below what the RTO-based plan waits for');

ok( $standby->poll_query_until(
		'postgres', "SELECT pg_last_wal_replay_lsn() >= '$target'"),
	'the trickle is replayed without greenreplica_batch_now()');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM trickle'), '1', 'the row is on the standby');
ok($standby->poll_query_until('postgres', "SELECT batches > $batches FROM greenreplica_status"),
	'a batch applied it');

# A reload changes the bound: 0 removes it, and the trickle then waits.
$standby->append_conf('postgresql.conf', "greenreplica.max_apply_delay = 0\n");
$standby->reload;
$primary->safe_psql('postgres', 'INSERT INTO trickle VALUES (2)');
$target = $primary->lsn('insert');
$primary->wait_for_catchup($standby, 'write', $target);
sleep(6);
is($standby->safe_psql('postgres', "SELECT pg_last_wal_replay_lsn() >= '$target'"),
	'f', 'without the bound the trickle waits for the plan');

$standby->stop;
$primary->stop;
done_testing();
