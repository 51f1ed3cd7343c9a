# Helpers shared by greenreplica's TAP tests: clusters set up the way the
# extension is deployed, whole-database comparison, and batch catch-up.
package GreenReplica;

use strict;
use warnings;

use Exporter 'import';
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
);

# A primary with the library preloaded and the extension created.
sub new_primary
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => 1, %{ $opts{init} // {} });
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'greenreplica'\n" . ($opts{conf} // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION greenreplica');
	return $node;
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
	$node->append_conf('postgresql.conf', $conf // '');
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

# Make the standby replay everything the primary has written so far,
# forcing batches as needed; fails the test if it does not get there.
sub replay_all
{
	my ($standby, $primary) = @_;
	my $target = $primary->lsn('insert');
	$primary->wait_for_catchup($standby, 'write', $target);
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1
		  if $standby->safe_psql('postgres',
			"SELECT pg_last_wal_replay_lsn() >= '$target'") eq 't';
		$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
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

1;
