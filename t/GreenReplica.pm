# Helpers shared by greenreplica's TAP tests: clusters set up the way the
# extension is deployed, whole-database comparison, and batch catch-up.
package GreenReplica;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

our @EXPORT = qw(
  new_primary
  new_standby
  table_fingerprints
  replay_all
  standby_status
  start_pgbench
  promote_and_time_first_write
  wait_for_phase
  wait_until_asleep
  agent_volume
  remove_agent_volume
  agent_request
  new_standby_on_volume
  pair_on_agent_volume
  check_promotion_in_phase
  init_pgbench
  amcheck_clean
  promote_crashed_and_compare
);

# A primary with the library preloaded and the extension created.
sub new_primary
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => 1, %{ $opts{init} // {} });
	# wal_keep_size: on a loaded machine a walsender can lag the primary's
	# checkpoints (max_wal_size is 128MB here) and find its next segment
	# recycled; the standby then reconnects, and greenreplica releases replay
	# while it does (a CI run of t/033 failed so).  Production standbys use a
	# replication slot; the tests' standbys keep the WAL this way.
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'greenreplica'\nwal_keep_size = 512MB\n"
		  . ($opts{conf} // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION greenreplica');
	return $node;
}

# pgbench's tables at scale $scale on $node (extra pgbench -i options in @extra).
sub init_pgbench
{
	my ($node, $scale, @extra) = @_;
	$node->command_ok(
		[
			'pgbench', '-i', '-s', $scale, '-q', @extra,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'pgbench tables loaded');
	return;
}

# GR_TEST_PREFETCH_METHOD=os_cache in the environment runs every standby's
# PREFETCH through the OS page cache (issue 14), so that the compaction
# tests cover both read paths.
sub prefetch_method_conf
{
	my $m = $ENV{GR_TEST_PREFETCH_METHOD};
	return defined $m && $m ne '' ? "greenreplica.prefetch_method = $m\n" : '';
}

# GR_TEST_CARRY_DIRTY_BUFFERS=on in the environment runs every standby with
# dirty buffers carried across batches (issue 14), so that the promotion and
# compaction tests cover that write-back path too.
sub carry_dirty_conf
{
	my $c = $ENV{GR_TEST_CARRY_DIRTY_BUFFERS};
	return defined $c && $c eq 'on'
	  ? "greenreplica.carry_dirty_buffers = on\nbgwriter_lru_maxpages = 0\n"
	  : '';
}

# What every test standby gets: the tests poll the standby while it applies
# a batch, and a batch replays WAL received long ago, which PostgreSQL counts
# as past max_standby_streaming_delay at once: a conflicting cleanup record
# would cancel the monitoring session (seen in t/024).  Replay waits for the
# millisecond queries instead.
sub standby_test_conf
{
	# The primary's wal_keep_size (new_primary) came with the base backup: a
	# standby's restartpoints must recycle its WAL as configured.
	return "max_standby_streaming_delay = -1\nwal_keep_size = 0\n"
	  . prefetch_method_conf()
	  . carry_dirty_conf();
}

# A streaming standby of $primary, from a fresh base backup, with extra
# configuration lines in $conf.
sub new_standby
{
	my ($primary, $name, $conf) = @_;
	my $backup = "${name}_base";
	$primary->backup($backup);
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary, $backup, has_streaming => 1);
	$node->append_conf('postgresql.conf', standby_test_conf() . ($conf // ''));
	$node->start;
	return $node;
}

# An ordered hash of every user table in every database: equal
# fingerprints mean equal contents.
sub table_fingerprints
{
	my ($node) = @_;
	my %fp;
	my @dbs = split /\n/,
	  $node->safe_psql('postgres',
		"SELECT datname FROM pg_database WHERE datallowconn ORDER BY 1");
	foreach my $db (@dbs)
	{
		my @tables = split /\n/, $node->safe_psql(
			$db, q{
			SELECT format('%I.%I', n.nspname, c.relname)
			  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE c.relkind IN ('r', 'm')
			   AND n.nspname NOT IN ('pg_catalog', 'information_schema')
			   AND n.nspname NOT LIKE 'pg_toast%'
			 ORDER BY 1});
		foreach my $table (@tables)
		{
			$fp{"$db.$table"} = $node->safe_psql($db,
				"SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '')
				   FROM $table t");
		}
	}
	return \%fp;
}

# pg_amcheck --all --heapallindexed on $node must find nothing ($what ends
# the test name).
sub amcheck_clean
{
	my ($node, $what) = @_;
	my ($stdout, $stderr) = ('', '');
	my $ok = IPC::Run::run(
		[ 'pg_amcheck', '--all', '--heapallindexed', '-h', $node->host, '-p', $node->port ],
		'>', \$stdout, '2>', \$stderr);
	ok($ok && $stdout eq '', "pg_amcheck --all --heapallindexed is clean $what")
	  or diag("stdout: $stdout\nstderr: $stderr");
	return;
}

# A standby crashed and started again: once back in recovery it is promoted,
# must equal $primary and pass pg_amcheck ($what names the crash).
sub promote_crashed_and_compare
{
	my ($primary, $standby, $what) = @_;
	my $primary_fp = table_fingerprints($primary);
	ok( $standby->poll_query_until('postgres', 'SELECT pg_is_in_recovery()'),
		'the crashed standby restarts in recovery');
	$standby->promote;
	ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
		'the restarted standby is promoted');
	is_deeply(table_fingerprints($standby), $primary_fp,
		"after $what and promotion the standby equals the primary");
	amcheck_clean($standby, 'after promotion');
	return;
}

# Make the standby replay everything the primary has written so far,
# forcing batches as needed, and wait for the batch under way to finish;
# fails the test if it does not get there.
sub replay_all
{
	my ($standby, $primary) = @_;
	my $target = $primary->lsn('insert');
	$primary->wait_for_catchup($standby, 'write', $target);
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		# A batch may cancel these queries (conflict with recovery): retry.
		my ($ret, $caught_up) = $standby->psql('postgres',
			"SELECT pg_last_wal_replay_lsn() >= '$target'
			        AND phase NOT IN ('wake', 'prefetch', 'apply', 'flush')
			   FROM greenreplica_status");
		# Caught up, and no batch is half-way (its figures are published).
		return 1 if $ret == 0 && $caught_up eq 't';
		$standby->psql('postgres', 'SELECT greenreplica_batch_now()');
		usleep(200_000);
	}
	fail("standby replayed up to $target");
	return 0;
}

# The standby's status as a hash of column => value.
sub standby_status
{
	my ($node, @columns) = @_;
	my $list = join(', ', @columns);
	my @values = split /\|/,
	  $node->safe_psql('postgres', "SELECT $list FROM greenreplica_status"), -1;
	my %status;
	@status{@columns} = @values;
	return \%status;
}

# pgbench against $node in the background for up to $seconds; returns the
# IPC::Run handle (kill_kill it to stop early).
sub start_pgbench
{
	my ($node, $seconds, @extra) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-T', $seconds, '-c', '2', @extra,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

# Promote $standby and return the seconds from the promote request to the
# first committed write on it: the RTO as a user sees it.
sub promote_and_time_first_write
{
	my ($standby) = @_;
	my $start = Time::HiRes::time();
	$standby->promote;
	my $deadline = $start + $PostgreSQL::Test::Utils::timeout_default;
	while (Time::HiRes::time() < $deadline)
	{
		my ($ret) = $standby->psql('postgres',
			'CREATE TABLE IF NOT EXISTS first_write (at timestamptz); INSERT INTO first_write VALUES (now())');
		return Time::HiRes::time() - $start if $ret == 0;
		usleep(10_000);
	}
	return undef;
}

# Watch the standby's phase closely (one session, a few ms apart) until it
# is $phase; returns true if seen before $seconds pass.
sub wait_for_phase
{
	my ($node, $phase, $seconds) = @_;
	my $session = $node->background_psql('postgres');
	my $deadline = Time::HiRes::time() + $seconds;
	my $seen = 0;
	while (!$seen && Time::HiRes::time() < $deadline)
	{
		$seen = $session->query_safe('SELECT phase FROM greenreplica_status') eq $phase;
		usleep(2_000) unless $seen;
	}
	$session->quit;
	return $seen;
}

# Ask the storage agent started by "make check" for a volume of emulated
# disks (template "tap": test-fast; "tap-36z15": ultrastar-36z15), mounted in
# a directory owned by us; returns the agent's volume name and the mount
# point.  The suites need the agent: without it
# they fail rather than pass vacuously.
sub agent_volume
{
	my ($prefix, $template) = @_;
	my $socket = $ENV{GR_AGENT_SOCKET}
	  or BAIL_OUT('GR_AGENT_SOCKET is not set: run the TAP suites through "make check", '
		  . 'which starts the storage agent');
	my $name = "${prefix}_$$";
	my $dir = "$ENV{GR_AGENT_VOLUMES}/$name";
	mkdir $dir or die "mkdir $dir: $!";
	my $reply = agent_request(
		{ op => 'create_volume', name => $name, template => $template // 'tap', directory => $dir });
	BAIL_OUT("the storage agent could not create a volume: " . ($reply->{error} // '?'))
	  unless $reply->{ok};
	return ($name, $dir);
}

sub remove_agent_volume
{
	my ($name) = @_;
	my $reply = agent_request({ op => 'remove_volume', name => $name });
	ok($reply->{ok}, "agent volume $name removed") or diag($reply->{error});
}

sub agent_request
{
	my ($request) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ $ENV{GR_AGENT_BIN}, '--socket', $ENV{GR_AGENT_SOCKET}, 'request', encode_json($request) ],
		'>', \$out, '2>', \$err);
	my $reply = eval { decode_json($out) };
	return $reply // { ok => 0, error => "no JSON reply: $out $err" };
}

# A streaming standby of $primary whose copy of tablespace directory
# $tablespace lives on the agent volume mounted at $mount.
sub new_standby_on_volume
{
	my ($primary, $name, $tablespace, $mount, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	my $data = $node->data_dir;
	PostgreSQL::Test::Utils::system_or_bail(
		'pg_basebackup', '-D', $data, '-h', $primary->host, '-p', $primary->port,
		'-X', 'stream', '--checkpoint=fast', '--no-sync',
		'-T', "$tablespace=$mount/tablespace");
	chmod(0700, $data);
	$node->enable_streaming($primary);
	$node->append_conf('postgresql.conf',
		"port = " . $node->port . "\nunix_socket_directories = '" . $node->host . "'\n"
		  . standby_test_conf() . ($conf // ''));
	$node->start;
	return $node;
}

# A primary with pgbench tables (scale $scale) in tablespace "data", and a
# deferring standby whose copy of that tablespace is on an agent volume the
# scheduler manages (agent template $template, "tap" by default).  Returns
# (primary, standby, volume name).
sub pair_on_agent_volume
{
	my ($prefix, $scale, $conf, $template) = @_;
	my ($volume, $mount) = agent_volume($prefix, $template);
	my $primary = new_primary("${prefix}_primary");
	my $tablespace = PostgreSQL::Test::Utils::tempdir("${prefix}_ts");
	$primary->safe_psql('postgres', "CREATE TABLESPACE data LOCATION '$tablespace'");
	init_pgbench($primary, $scale, '--tablespace=data', '--index-tablespace=data');
	my $standby = new_standby_on_volume(
		$primary, "${prefix}_standby", $tablespace, $mount, qq{
greenreplica.mode = defer
greenreplica.agent_socket = '$ENV{GR_AGENT_SOCKET}'
greenreplica.agent_volume = '$volume'
$conf
});
	return ($primary, $standby, $volume);
}

# Wait until $node sleeps between batches with its volume asleep, as the
# agent reports it; says why not when it does not get there.
sub wait_until_asleep
{
	my ($node) = @_;
	return 1
	  if $node->poll_query_until('postgres',
		"SELECT phase = 'sleep' AND agent = 'connected' AND volume_state = 'standby'
		   FROM greenreplica_status");
	diag(explain(standby_status($node, 'phase', 'volume_state', 'note')));
	return 0;
}

# The RTO scenario for one phase of the batch cycle: a standby on an agent
# volume, batching under a throttled pgbench load, is promoted the moment
# its scheduler is seen in $phase; its first committed write must come
# within $rto seconds.  $conf adds standby settings.
sub check_promotion_in_phase
{
	my ($phase, $rto, $conf) = @_;
	my ($primary, $standby, $volume) = pair_on_agent_volume($phase, 5, qq{
greenreplica.rto = ${rto}s
greenreplica.window_size = 48MB
shared_buffers = 256MB
$conf
});
	ok( $standby->poll_query_until(
			'postgres', "SELECT phase = 'sleep' AND agent = 'connected' FROM greenreplica_status"),
		'the standby batches with the agent');

	my $load = start_pgbench($primary, 120, '--rate=400');
	ok(wait_for_phase($standby, $phase, 90), "the scheduler entered \U$phase\E under load");

	my $took = promote_and_time_first_write($standby);
	$load->kill_kill;
	ok(defined $took, 'the promoted standby took a write');
	cmp_ok($took, '<=', $rto,
		sprintf("promote during \U$phase\E to first committed write took %.2f s, within the RTO of %d s",
			$took // -1, $rto));
	is($standby->safe_psql('postgres', 'SELECT role FROM greenreplica_status'),
		'primary', 'the standby is a primary now');

	$standby->stop;
	remove_agent_volume($volume);
	return;
}

1;
