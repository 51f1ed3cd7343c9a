# Without shared_preload_libraries the library loads as pg_stat_statements
# does: CREATE EXTENSION (and so the restore of a dump) works, the pure
# planner works, and what needs the scheduler's shared memory fails with an
# error that says how to fix it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('no_preload');
$node->init;
$node->start;

my ($ret, $stdout, $stderr) =
  $node->psql('postgres', 'CREATE EXTENSION greenreplica');
is($ret, 0, 'CREATE EXTENSION works without shared_preload_libraries');

($ret, $stdout, $stderr) = $node->psql('postgres', 'SELECT * FROM greenreplica_status');
isnt($ret, 0, 'the status view fails without shared_preload_libraries');
like(
	$stderr,
	qr/greenreplica_status\(\) needs greenreplica loaded via shared_preload_libraries/,
	'the error names the problem');
like(
	$stderr,
	qr/HINT:.*Add greenreplica to shared_preload_libraries/,
	'the hint says what to do');

is( $node->safe_psql(
		'postgres', 'SELECT feasible FROM greenreplica_plan(1e6, 5e7, 100, 0, 1e9::bigint)'),
	't', 'the planner works without the preload');

# A dump of a database with the extension restores on such a server.
my $dump = $node->basedir . '/with_extension.sql';
$node->command_ok([ 'pg_dump', '-f', $dump, '-d', $node->connstr('postgres') ],
	'pg_dump of a database with the extension');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-f', $dump, '-d', $node->connstr('restored') ],
	'the dump restores without shared_preload_libraries');
is($node->safe_psql('restored',
		"SELECT count(*) FROM pg_extension WHERE extname = 'greenreplica'"),
	'1', 'the restored database has the extension');

$node->stop;
done_testing();
