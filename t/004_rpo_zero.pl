# RPO = 0: with synchronous replication, a deferring standby still flushes
# every commit before the primary acknowledges it.  Crash the primary at
# random moments under load, promote the standby: every acknowledged commit
# is there.  Several iterations, each with a fresh pair.
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

my $iterations = 3;

foreach my $i (1 .. $iterations)
{
	my $primary = new_primary("primary$i");
	$primary->safe_psql('postgres',
		'CREATE TABLE acked (id integer PRIMARY KEY, at timestamptz DEFAULT now())');
	init_pgbench($primary, 1);
	my $standby = new_standby(
		$primary, "standby$i", qq{
greenreplica.mode = defer
greenreplica.rto = 30s
greenreplica.window_size = 4MB
});
	$primary->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'standby$i'");
	$primary->reload;
	$primary->poll_query_until('postgres',
		"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby$i'")
	  or die "standby$i did not become synchronous";

	# Background load, and a client that records each acknowledged commit.
	my $connstr = $primary->connstr('postgres');
	my $acked_file = "$PostgreSQL::Test::Utils::tmp_check/acked$i";
	my $load = IPC::Run::start(
		[ 'pgbench', '-n', '-T', '30', '-c', '2', '-h', $primary->host, '-p', $primary->port, 'postgres' ],
		'>', \my $load_out, '2>', \my $load_err);
	my $writer = IPC::Run::start(
		[
			'bash', '-c',
			qq{for n in \$(seq 1 100000); do
				 psql -X -q "$connstr" -c "INSERT INTO acked (id) VALUES (\$n)" 2>/dev/null || exit 0
				 echo \$n >> "$acked_file"
			   done}
		]);

	usleep(1_000_000 + int(rand(3_000_000)));
	$primary->stop('immediate');
	$writer->finish;
	$load->finish;

	my @acked = ();
	if (open my $fh, '<', $acked_file)
	{
		chomp(@acked = <$fh>);
		close $fh;
	}
	cmp_ok(scalar(@acked), '>', 0, "iteration $i: commits were acknowledged before the crash");

	$standby->promote;
	my $present = $standby->safe_psql('postgres', 'SELECT count(*) FROM acked');
	my $missing = $standby->safe_psql('postgres',
		'SELECT count(*) FROM unnest(ARRAY[' . join(',', @acked, 0) . ']) AS a(id)
		  WHERE id > 0 AND NOT EXISTS (SELECT 1 FROM acked WHERE acked.id = a.id)');
	is($missing, '0',
		"iteration $i: all " . scalar(@acked) . " acknowledged commits survive on the promoted standby ($present rows)");

	$standby->stop('fast');
}

done_testing();
