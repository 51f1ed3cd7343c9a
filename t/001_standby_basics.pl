# A primary and a streaming standby, both with greenreplica preloaded: the
# extension created on the primary reaches the standby, the scheduler runs
# only there, follows reloads, survives being terminated, and gets out of
# the way of promotion.  The standby starts in mode "off" (plain replay) and
# is switched to batched replay by a reload.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf',
	"shared_preload_libraries = 'greenreplica'");
$primary->start;
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->append_conf('postgresql.conf', 'greenreplica.mode = off');
$standby->start;

$primary->safe_psql('postgres', 'CREATE EXTENSION greenreplica');
$primary->safe_psql('postgres',
	'CREATE TABLE items AS SELECT g AS id, md5(g::text) AS payload
	   FROM generate_series(1, 5000) g');
$primary->wait_for_catchup($standby, 'replay');

is($primary->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
	'primary', 'greenreplica_status on the primary says primary');
is($standby->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
	'standby', 'greenreplica_status on the standby says standby');

is( $primary->safe_psql(
		'postgres', 'SELECT worker_pid IS NULL FROM greenreplica_status'),
	't',
	'no scheduler runs on the primary');
ok( $standby->poll_query_until(
		'postgres',
		"SELECT phase = 'off' AND worker_pid IS NOT NULL FROM greenreplica_status"
	),
	'the scheduler runs on the standby, replaying freely in mode off');

my $table_hash =
  "SELECT count(*), md5(string_agg(id || ':' || payload, ',' ORDER BY id)) FROM items";
is($standby->safe_psql('postgres', $table_hash),
	$primary->safe_psql('postgres', $table_hash),
	'data written on the primary is on the standby');

# Parameters are reloadable on the standby.
$standby->safe_psql('postgres',
	"ALTER SYSTEM SET greenreplica.mode = 'defer'");
$standby->reload;
ok( $standby->poll_query_until(
		'postgres', "SELECT mode = 'defer' AND phase = 'sleep' FROM greenreplica_status"),
	'greenreplica.mode changes on reload and batching begins');

# A terminated scheduler is restarted by the postmaster.
my $old_pid =
  $standby->safe_psql('postgres', 'SELECT worker_pid FROM greenreplica_status');
# The scheduler has no database connection, so signal it directly.
kill 'TERM', $old_pid;
ok( $standby->poll_query_until(
		'postgres',
		"SELECT worker_pid IS NOT NULL AND worker_pid <> $old_pid
		   AND phase = 'sleep' FROM greenreplica_status"),
	'the scheduler restarts after being terminated');
$primary->safe_psql('postgres',
	"INSERT INTO items SELECT g, md5(g::text) FROM generate_series(5001, 6000) g");
replay_all($standby, $primary);
is($standby->safe_psql('postgres', $table_hash),
	$primary->safe_psql('postgres', $table_hash),
	'batches replay what the primary wrote');

# Promotion: the scheduler steps aside and the new primary takes writes.
$standby->promote;
ok( $standby->poll_query_until(
		'postgres',
		"SELECT role = 'primary' AND phase = 'inactive' AND worker_pid IS NULL
		   FROM greenreplica_status"),
	'after promotion the scheduler has exited');
$standby->safe_psql('postgres', 'INSERT INTO items VALUES (6001, \'after\')');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM items'),
	'6001', 'the promoted standby accepts writes');

# Fast shutdown is not held up by the extension.
$standby->stop('fast');
$primary->stop('fast');
pass('both servers shut down');

done_testing();
