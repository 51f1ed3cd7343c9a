# The TPC-C-like workload on a primary with a deferring standby: the
# specification's consistency conditions hold on the primary after the run
# and on the standby after it is promoted, and the standby holds exactly
# the primary's data.  A deliberate violation is caught by the check.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tpcc = "$FindBin::RealBin/../bench/tpcc/tpcc.sh";

# Run tpcc.sh against $node; returns (exit code, output).
sub tpcc
{
	my ($node, @args) = @_;
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = 'postgres';
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'bash', $tpcc, @args ], '>', \$out, '2>', \$err);
	return ($? >> 8, "$out$err");
}

my $primary = new_primary('primary');
my ($rc, $out) = tpcc($primary, 'init', 1);
is($rc, 0, 'one warehouse loaded') or diag($out);
is($primary->safe_psql('postgres',
		'SELECT (SELECT count(*) FROM item) || \'/\' || (SELECT count(*) FROM stock) || \'/\'
		     || (SELECT count(*) FROM customer) || \'/\' || (SELECT count(*) FROM new_order)'),
	'100000/100000/30000/9000', 'the specification\'s initial cardinalities');

my $standby = new_standby(
	$primary, 'standby', q{
greenreplica.mode = defer
greenreplica.rto = 20s
greenreplica.window_size = 8MB
});

($rc, $out) = tpcc($primary, 'run', 20, 2);
is($rc, 0, 'the TPC-C mix ran') or diag($out);
like($out, qr/new_order\.pgbench.*?number of failed transactions: 0/s,
	'no New-Order failed (the 1 % rollbacks are part of the transaction)');
cmp_ok(standby_status($standby, 'batches')->{batches}, '>', 0, 'the standby replayed in batches');

($rc, $out) = tpcc($primary, 'check');
is($rc, 0, 'consistency conditions hold on the primary') or diag($out);

replay_all($standby, $primary);
is_deeply(table_fingerprints($standby), table_fingerprints($primary),
	'after a final batch the standby equals the primary');

$standby->promote;
($rc, $out) = tpcc($standby, 'check');
is($rc, 0, 'consistency conditions hold on the promoted standby') or diag($out);

$standby->safe_psql('postgres', 'UPDATE warehouse SET w_ytd = w_ytd + 1');
($rc, $out) = tpcc($standby, 'check');
isnt($rc, 0, 'a violated condition is reported');
like($out, qr/1: W_YTD = sum\(D_YTD\)\s*\|\s*1/, 'the check names the violated condition');

done_testing();
