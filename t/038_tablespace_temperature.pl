# Tablespace temperatures: on a standby whose tablespace lives on a QMD
# volume of the storage agent, greenreplica_set_volume_temperature() marks
# the whole volume and greenreplica_set_tablespace_temperature() maps the
# tablespace's files to volume extents (FIEMAP) and marks them on the agent
# (later marks replacing earlier ones), which journals them; the errors of a tablespace on pg_wal's
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

# The power states of the pair's two disks (members 0 and 1; 2 is the flash).
sub pair_states
{
	my $v = GreenReplica::agent_request({ op => 'volume', volume => $volume })->{volume};
	return map { $_->{state} } @{ $v->{members} }[ 0, 1 ];
}

# Idle and unmarked, the utilization policy (3 quiet epochs) lets the second
# disk sleep and keeps the active one up.
my $second_asleep = 0;
for (1 .. 120)
{
	my ($active, $second) = pair_states();
	if ($second eq 'standby') { $second_asleep = 1; last; }
	sleep 1;
}
ok($second_asleep, 'idle, the second disk sleeps');
sleep 8;
isnt((pair_states())[0], 'standby', 'an unmarked pair keeps its active disk spinning');

# A pair sleeps whole only when it holds no unmarked data (ext4's own blocks are on the
# volume too): the DBA marks the whole volume cold from SQL first, then the tablespace.
my ($marked, $ranges) = split /\|/, $standby->safe_psql('postgres',
	"SELECT * FROM greenreplica_set_volume_temperature('cold')");
is($marked, $status->{volume}{capacity_bytes},
	'the whole volume marked cold from SQL: its capacity in bytes');
is($ranges, 1, 'one cold range held by the agent');

my ($sent, $files, $skipped) = split /\|/, $standby->safe_psql('postgres',
	"SELECT * FROM greenreplica_set_tablespace_temperature('data', 'cold')");
cmp_ok($sent, '>', 0, "the tablespace's files mapped to $sent volume extents");
cmp_ok($files // 0, '>', 0, 'from ' . ($files // 'no count of') . ' files');
is($skipped, 0, 'no file skipped');

$status = GreenReplica::agent_request({ op => 'volume', volume => $volume });
cmp_ok($status->{volume}{temperatures}{cold_bytes}, '>=', 8192 * 100,
	'the agent holds the cold ranges of the pgbench tables');
is($status->{volume}{temperatures}{hot_bytes}, 0, 'and no hot ones');
is_deeply($status->{volume}{temperatures}{cold_groups}, [0],
	'the only pair holds cold data only: it may sleep whole');

my $both_asleep = 0;
for (1 .. 120)
{
	my ($active, $second) = pair_states();
	if ($active eq 'standby' && $second eq 'standby') { $both_asleep = 1; last; }
	sleep 1;
}
ok($both_asleep, 'marked cold, the pair sleeps whole (both disks)');
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	"the standby's data equals the primary's");

# A file of the tablespace the function cannot open is named in a WARNING
# and counted, and the rest is marked all the same.
my ($db_dir) = glob($standby->data_dir . '/pg_tblspc/*/PG_*/*');
my $unreadable = "$db_dir/gr_unreadable";
open my $fh, '>', $unreadable or die "create $unreadable: $!";
print $fh 'x' x 8192;
close $fh;
chmod 0000, $unreadable;
my ($ret, $out, $err) = $standby->psql('postgres',
	"SELECT * FROM greenreplica_set_tablespace_temperature('data', 'cold')");
is($ret, 0, 'marking with an unreadable file succeeds');
like($out, qr/^[1-9][0-9]*\|[1-9][0-9]*\|1$/,
	'the rest is marked and the unreadable file counted as skipped');
like($err, qr/WARNING:  file ".*gr_unreadable" was not marked: could not open it/,
	'a WARNING names the skipped file');
unlink $unreadable;

$standby->safe_psql('postgres',
	"SELECT greenreplica_set_tablespace_temperature('data', 'hot')");
$status = GreenReplica::agent_request({ op => 'volume', volume => $volume });
cmp_ok($status->{volume}{temperatures}{hot_bytes}, '>=', 8192 * 100,
	'marking it hot replaces cold there');
is_deeply($status->{volume}{temperatures}{cold_groups}, [],
	'the only pair stays up for hot data (no other pair to hold a copy)');

($ret, $out, $err) = $standby->psql('postgres',
	"SELECT greenreplica_set_tablespace_temperature('pg_default', 'cold')");
like($err, qr/tablespace "pg_default" is on the file system of pg_wal/,
	'a tablespace beside pg_wal is refused');

# The agent goes away (its socket path no longer answers).
# (tmp_check, not the node's basedir: a socket path must stay under 108 bytes, and the
# basedir of a fresh clone's check directory is longer than that.)
$standby->append_conf('postgresql.conf',
	"greenreplica.agent_socket = '$PostgreSQL::Test::Utils::tmp_check/no-agent.sock'\n");
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
