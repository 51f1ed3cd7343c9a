/*-------------------------------------------------------------------------
 *
 * gr_wake.c
 *	  The batch's wake decision: plain, or for a write-only window.
 *
 * See gr_wake.h.  Pure logic, unit-tested in test/unit/test_wake.c.
 *
 *-------------------------------------------------------------------------
 */
#include "gr_wake.h"

uint64_t
gr_wake_reads_left(const GrWakeInputs *in)
{
	uint64_t	filtered = in->in_shared_buffers + in->in_os_cache + in->past_end;

	/* Counts that do not add up (a block counted twice) leave nothing out. */
	if (filtered < in->in_shared_buffers || filtered > in->reads_needed)
		return in->reads_needed;
	return in->reads_needed - filtered;
}

GrWakeKind
gr_wake_kind(const GrWakeInputs *in, const char **why)
{
	const char *reason;
	GrWakeKind	kind = GR_WAKE_PLAIN;

	/*
	 * Only a window decoded to its end is known whole: the WAL past a split
	 * or an early stop may read anything.  A window split at its read bound
	 * is whole up to the split, where the batch then ends.
	 */
	if (!in->decoded_whole && !in->split_on_reads)
		reason = "the window was not decoded whole";
	else if (gr_wake_reads_left(in) > 0)
		reason = "the window reads from the volume";
	/* The agent must see every written extent to leave the rest asleep. */
	else if (!in->write_extents_complete)
		reason = "the window writes more extents than one request holds";
	else
	{
		reason = in->decoded_whole ? "the window only writes" :
			"the window only writes up to its read bound, where the batch ends";
		kind = GR_WAKE_WRITES_ONLY;
	}
	if (why)
		*why = reason;
	return kind;
}

bool
gr_wake_cuts_batch(const GrWakeInputs *in, GrWakeKind kind)
{
	return kind == GR_WAKE_WRITES_ONLY && !in->decoded_whole && in->split_on_reads;
}
