/*
 * Unit tests of the batch's wake decision (src/gr_wake.c): a window that
 * reads nothing from the volume after the filters asks for a write-only
 * wake; anything else, a plain one.
 * Built and run by scripts/check.sh; prints "N passed, M failed".
 */
#include <stdio.h>
#include <string.h>

#include "../../src/gr_wake.h"
#include "unit.h"

static GrWakeInputs
whole(uint64_t reads, uint64_t shared, uint64_t os, uint64_t past_end)
{
	GrWakeInputs in;

	memset(&in, 0, sizeof(in));
	in.decoded_whole = true;
	in.reads_needed = reads;
	in.in_shared_buffers = shared;
	in.in_os_cache = os;
	in.past_end = past_end;
	in.write_extents_complete = true;
	return in;
}

int
main(void)
{
	GrWakeInputs in;
	const char *why = NULL;

	/* Every first touch an image or an init: nothing to read. */
	in = whole(0, 0, 0, 0);
	expect(gr_wake_kind(&in, &why) == GR_WAKE_WRITES_ONLY,
		   "a window of images and inits wakes for its writes only");
	expect(why != NULL && strstr(why, "only writes") != NULL, "and says so");

	/* Reads all served by the caches or past the end. */
	in = whole(10, 4, 5, 1);
	expect(gr_wake_reads_left(&in) == 0, "resident and new blocks leave no read");
	expect(gr_wake_kind(&in, NULL) == GR_WAKE_WRITES_ONLY,
		   "a window whose reads are all resident wakes for its writes only");

	/* One block left to read. */
	in = whole(10, 4, 5, 0);
	expect(gr_wake_reads_left(&in) == 1, "one read left");
	expect(gr_wake_kind(&in, &why) == GR_WAKE_PLAIN, "one read left: a plain wake");
	expect(strstr(why, "reads") != NULL, "the reason names the reads");

	/* No filter applied at all. */
	in = whole(3, 0, 0, 0);
	expect(gr_wake_kind(&in, NULL) == GR_WAKE_PLAIN, "unfiltered reads: a plain wake");

	/* A split or stopped decode: the rest of the batch is unknown. */
	in = whole(0, 0, 0, 0);
	in.decoded_whole = false;
	expect(gr_wake_kind(&in, &why) == GR_WAKE_PLAIN,
		   "a window not decoded whole gets a plain wake");
	expect(strstr(why, "decoded") != NULL, "the reason names the decode");

	/*
	 * A window that stopped at its read bound (the prefetch's memory) is not
	 * decoded to the batch end, but the batch can end where it stopped: when
	 * it reads nothing the wake is write-only and the batch is cut there.
	 * (bench/energy's compact_qmd: every 16 MB window past 4,096 reads
	 * split, and every such batch woke both disks for no read.)
	 */
	in = whole(0, 0, 0, 0);
	in.decoded_whole = false;
	in.split_on_reads = true;
	expect(gr_wake_kind(&in, &why) == GR_WAKE_WRITES_ONLY,
		   "a window split at its read bound that reads nothing wakes for its writes only");
	expect(strstr(why, "read bound") != NULL, "the reason names the cut");
	expect(gr_wake_cuts_batch(&in, GR_WAKE_WRITES_ONLY),
		   "and the batch ends at the split");
	in = whole(10, 4, 5, 0);
	in.decoded_whole = false;
	in.split_on_reads = true;
	expect(gr_wake_kind(&in, NULL) == GR_WAKE_PLAIN,
		   "a split window with a read left gets a plain wake");
	expect(!gr_wake_cuts_batch(&in, GR_WAKE_PLAIN), "and the batch is not cut");
	in = whole(0, 0, 0, 0);
	expect(!gr_wake_cuts_batch(&in, GR_WAKE_WRITES_ONLY),
		   "a window decoded whole never cuts the batch");

	/* Written extents that do not fit one request. */
	in = whole(0, 0, 0, 0);
	in.write_extents_complete = false;
	expect(gr_wake_kind(&in, NULL) == GR_WAKE_PLAIN,
		   "writes the agent cannot be told in full get a plain wake");

	/* Counts that do not add up never hide a read. */
	in = whole(5, 4, 4, 0);
	expect(gr_wake_reads_left(&in) == 5, "over-counted filters leave every read");
	expect(gr_wake_kind(&in, NULL) == GR_WAKE_PLAIN, "and the wake is plain");
	in = whole(5, UINT64_MAX, 2, 0);
	expect(gr_wake_reads_left(&in) == 5, "an overflowing count leaves every read");

	return unit_report();
}
