# Without shared_preload_libraries the library refuses to load, with an
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
isnt($ret, 0, 'CREATE EXTENSION fails without shared_preload_libraries');
like(
	$stderr,
	qr/greenreplica must be loaded via shared_preload_libraries/,
	'the error names the problem');
like(
	$stderr,
	qr/HINT:.*Add greenreplica to shared_preload_libraries/,
	'the hint says what to do');

($ret, $stdout, $stderr) = $node->psql('postgres', "LOAD 'greenreplica'");
isnt($ret, 0, 'LOAD fails without shared_preload_libraries');

is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_extension WHERE extname = 'greenreplica'"),
	'0', 'nothing was created');

$node->stop;
done_testing();
