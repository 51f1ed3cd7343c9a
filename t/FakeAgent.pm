# A stand-in for the storage agent's control socket, for tests of how the
# extension copes with an agent that answers, fails or vanishes.  It speaks
# the documented protocol (one JSON object per line each way) for one
# volume, keeps its power state, and logs every request to a file.
package FakeAgent;

use strict;
use warnings;

use IO::Socket::UNIX;
use JSON::PP;
use POSIX ();

# Start a fake agent on $socket_path in a child process; returns its pid.
# With malformed => 1 it answers every request with garbage.
# capacity_bytes => N adds the volume's capacity to the "volume" reply;
# layout => NAME answers set_temperature as that layout would (only "qmd"
# keeps temperatures); replies_dir => DIR answers an op with the raw line in
# DIR/<op> while that file exists (a buggy or hostile agent).  With
# ledger => 1 the volume reports a ledger whose spin_ups counts the wakes of
# a sleeping volume, unless wakes_spin => 0: then no wake spins a disk up
# (as a write-only wake that a flash buffer absorbs).  With flash_wakes => 1
# the volume also reports disk_spin_ups (the spinning members' alone) and
# every wake of a sleeping volume wakes its flash member, which the ledger's
# spin_ups counts (as the real agent's does).
sub start
{
	my (%opts) = @_;
	my $path = $opts{socket};
	my $log = $opts{log};
	unlink $path;
	my $server = IO::Socket::UNIX->new(
		Type => SOCK_STREAM(),
		Local => $path,
		Listen => 16) or die "fake agent: cannot listen on $path: $!";

	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid)
	{
		close $server;
		return $pid;
	}

	my $json = JSON::PP->new->canonical;
	my $state = 'active';
	my $spin_ups = 0;
	my $wakes_spin = $opts{wakes_spin} // 1;
	my $disk_spin_ups = 0;
	while (my $client = $server->accept)
	{
		my $line = <$client>;
		next unless defined $line;
		if (open my $fh, '>>', $log)
		{
			print $fh $line;
			close $fh;
		}
		if ($opts{malformed})
		{
			print $client "this is not json\n";
			close $client;
			next;
		}
		my $req = eval { $json->decode($line) } // {};
		my $op = $req->{op} // '';
		my $reply;
		my $raw = $opts{replies_dir} && $op =~ /^\w+$/ && "$opts{replies_dir}/$op";
		if ($raw && open my $rfh, '<', $raw)
		{
			my $text = <$rfh>;
			close $rfh;
			chomp $text;
			print $client "$text\n";
			close $client;
			next;
		}
		if ($op eq 'volume')
		{
			$reply = {
				ok => JSON::PP::true,
				volume => {
					name => $req->{volume},
					state => $state,
					profile => { name => 'fake', spin_up_s => 0.2, break_even_s => 0.5 },
					($opts{ledger}
						? (ledger => { reads => 0, writes => 0, spin_ups => $spin_ups })
						: ())
				}
			};
			$reply->{volume}{disk_spin_ups} = $disk_spin_ups if $opts{flash_wakes};
			$reply->{volume}{capacity_bytes} = $opts{capacity_bytes}
			  if defined $opts{capacity_bytes};
		}
		elsif ($op eq 'set_temperature' && ($opts{layout} // '') eq 'qmd')
		{
			$reply = {
				ok => JSON::PP::true,
				volume => $req->{volume},
				ranges => scalar @{ $req->{extents} // [] }
			};
		}
		elsif ($op eq 'set_temperature' && defined $opts{layout})
		{
			$reply = {
				ok => JSON::PP::false,
				error => "layout $opts{layout} keeps no hot or cold ranges"
			};
		}
		elsif ($op eq 'wake')
		{
			$spin_ups++ if $state eq 'standby' && ($wakes_spin || $opts{flash_wakes});
			$disk_spin_ups++ if $state eq 'standby' && $wakes_spin;
			$state = 'active';
			$reply = { ok => JSON::PP::true, state => 'spinning_up', ready_in_s => 0.2 };
		}
		elsif ($op eq 'sleep')
		{
			$state = 'standby';
			$reply = { ok => JSON::PP::true, state => 'spinning_down' };
		}
		else
		{
			$reply = { ok => JSON::PP::false, error => "unknown op \"$op\"" };
		}
		print $client $json->encode($reply), "\n";
		close $client;
	}
	POSIX::_exit(0);
}

# The ops the fake agent has been sent so far, in order.
sub requests
{
	my ($log) = @_;
	open my $fh, '<', $log or return ();
	my @ops = map { (JSON::PP->new->decode($_)->{op}) // '?' } <$fh>;
	close $fh;
	return @ops;
}

# The requests the fake agent has been sent so far, decoded, in order.
sub request_objects
{
	my ($log) = @_;
	open my $fh, '<', $log or return ();
	my @reqs = map { JSON::PP->new->decode($_) } <$fh>;
	close $fh;
	return @reqs;
}

1;
