# RTO kept: the standby's tablespace is on an agent volume of emulated
# test-fast disks.  Promote while the scheduler is in its FLUSH phase,
# with a large batch under way: the promoted standby takes its first write
# within greenreplica.rto.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use GreenReplica;
use Test::More;

check_promotion_in_phase('flush', 10, '');

done_testing();
