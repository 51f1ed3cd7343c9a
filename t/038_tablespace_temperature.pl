# Tablespace temperatures: on a standby whose tablespace lives on a QMD
# volume of the storage agent, greenreplica_set_tablespace_temperature()
# maps the tablespace's files to volume extents (FIEMAP) and marks them on
# the agent, which journals them; the errors of a tablespace on pg_wal's
# file system and of an absent agent are clear.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($primary, $standby, $volume) = pair_on_agent_volume('temperature', 1, '', 'tap-qmd');
replay_all($standby, $primary);

my $status = GreenReplica::agent_request({ op => 'volume', volume => $volume });
ok($status->{ok}, 'the agent describes the QMD volume');
is($status->{volume}{layout}, 'qmd', 'the volume is QMD');
is($status->{volume}{temperatures}{ranges}, 0, 'nothing is marked yet');

my $sent = $standby->safe_psql('postgres',
	"SELECT greenreplica_set_tablespace_temperature('data', 'cold')");
cmp_ok($sent, '>', 0, "the tablespace's files mapped to $sent volume extents");

$status = GreenReplica::agent_request({ op => 'volume', volume => $volume });
cmp_ok($status->{volume}{temperatures}{cold_bytes}, '>=', 8192 * 100,
	'the agent holds the cold ranges of the pgbench tables');
is($status->{volume}{temperatures}{hot_bytes}, 0, 'and no hot ones');
is_deeply($status->{volume}{temperatures}{cold_groups}, [0],
	'the only pair holds cold data only: it may sleep whole');

$standby->safe_psql('postgres',
	"SELECT greenreplica_set_tablespace_temperature('data', 'hot')");
$status = GreenReplica::agent_request({ op => 'volume', volume => $volume });
is($status->{volume}{temperatures}{cold_bytes}, 0, 'marking it hot replaces cold');
is_deeply($status->{volume}{temperatures}{cold_groups}, [], 'the pair stays up for hot data');

my ($ret, $out, $err) = $standby->psql('postgres',
	"SELECT greenreplica_set_tablespace_temperature('pg_default', 'cold')");
like($err, qr/tablespace "pg_default" is on the file system of pg_wal/,
	'a tablespace beside pg_wal is refused');

# The agent goes away (its socket path no longer answers).
$standby->append_conf('postgresql.conf',
	"greenreplica.agent_socket = '" . $standby->basedir . "/no-agent.sock'\n");
$standby->reload;
ok($standby->poll_query_until('postgres',
		"SELECT current_setting('greenreplica.agent_socket') LIKE '%no-agent.sock'"),
	'the standby points at a socket nobody listens on');
($ret, $out, $err) = $standby->psql('postgres',
	"SELECT greenreplica_set_tablespace_temperature('data', 'cold')");
like($err, qr/could not mark tablespace "data" cold on the storage agent/,
	'an absent agent is an error');
like($err, qr/could not connect/, 'whose detail says why');

$standby->stop;
remove_agent_volume($volume);
done_testing();
