# Hint bits set by hot-standby queries while replay is paused and the data
# volume sleeps.  A query that reads tuples whose commit status is not yet
# hinted may set the hints in shared buffers; with wal_log_hints = on
# PostgreSQL never dirties a page for that during recovery, so the query
# leaves nothing to write to the sleeping volume.  With wal_log_hints = off
# it may (only for commits below the minimum recovery point), which is
# measured here and reported, not asserted; so is the I/O the agent's ledger
# books on the sleeping volume after the query (operations.md).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Reads and writes the agent's ledger booked on the volume's members so far.
sub volume_reads_writes
{
	my ($volume) = @_;
	my $reply = agent_request({ op => 'volume', volume => $volume });
	my ($reads, $writes) = (0, 0);
	for my $member (@{ $reply->{volume}{members} // [] })
	{
		$reads += $member->{ledger}{reads} // 0;
		$writes += $member->{ledger}{writes} // 0;
	}
	return ($reads, $writes);
}

# Returns (dirty buffers added by the query, member writes during the sleep).
sub hint_bits_during_sleep
{
	my ($wal_log_hints) = @_;
	my ($primary, $standby, $volume) = pair_on_agent_volume("hints_$wal_log_hints", 1, qq{
greenreplica.rto = 60s
greenreplica.max_apply_delay = 0
wal_log_hints = $wal_log_hints
});
	# Rows the standby has never seen hinted.
	$primary->safe_psql('postgres', q{
CREATE EXTENSION pg_buffercache;
CREATE TABLE h (id int, pad text) TABLESPACE data;
INSERT INTO h SELECT g, repeat('x', 100) FROM generate_series(1, 100000) g;
});
	$primary->wait_for_catchup($standby, 'write');
	$standby->safe_psql('postgres', 'SELECT greenreplica_batch_now()');
	ok( $standby->poll_query_until(
			'postgres',
			"SELECT batches >= 1 AND phase = 'sleep' AND volume_state = 'standby'
			        AND sleep_volume_ios = 0
			   FROM greenreplica_status"),
		"wal_log_hints = $wal_log_hints: the batch applied the rows and the volume sleeps");

	my $dirty = q{SELECT count(*) FROM pg_buffercache b JOIN pg_class c
	                ON b.relfilenode = pg_relation_filenode(c.oid) WHERE c.relname = 'h' AND b.isdirty};
	my $before = $standby->safe_psql('postgres', $dirty);
	my ($reads_before, $writes_before) = volume_reads_writes($volume);
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM h'), '100000',
		"wal_log_hints = $wal_log_hints: a standby query read every row");
	my $added = $standby->safe_psql('postgres', $dirty) - $before;

	# Give the background writer and the checkpointer time to act.
	sleep(20);
	my $ios = $standby->safe_psql('postgres', 'SELECT sleep_volume_ios FROM greenreplica_status');
	my $phase = $standby->safe_psql('postgres', 'SELECT phase FROM greenreplica_status');
	my ($reads_after, $writes_after) = volume_reads_writes($volume);
	my $writes = $writes_after - $writes_before;
	diag("wal_log_hints = $wal_log_hints: of those, member reads "
		  . ($reads_after - $reads_before) . ", member writes $writes");
	diag("wal_log_hints = $wal_log_hints: the query dirtied $added buffers; "
		  . "the sleeping volume saw $ios I/Os in the next 20 s (phase $phase)");
	$standby->stop;
	$primary->stop;
	remove_agent_volume($volume);
	return ($added, $writes);
}

hint_bits_during_sleep('off');
my ($dirty_on, $writes_on) = hint_bits_during_sleep('on');
is($dirty_on, 0, 'wal_log_hints = on: the standby query dirtied no page of the sleeping volume');
# Reading files a batch has just written must not write to the volume either: with the
# default relatime the first read after a modification updates the inode's atime, and
# ext4's next journal commit writes it, waking the sleeping disk (the agent mounts with
# noatime).  A read the page cache cannot serve may wake it; that is the query's due.
is($writes_on, 0, 'wal_log_hints = on: nothing was written to the sleeping volume after the standby query');

done_testing();
