/*-------------------------------------------------------------------------
 *
 * gr_align.c
 *	  The window's runs aligned to the data volume's boundaries (issue 18).
 *
 * The storage agent cuts every request at its layout's boundaries: chunk
 * ends, and on the track-aligned layouts (raid0-tracks, raid5-tracks) the
 * ends of member tracks.  Once per batch, before PREFETCH, the scheduler
 * asks the agent for the boundaries over the window's span (the "boundaries"
 * op) and keeps them with the window; the hint and the os_cache read ranges
 * are then planned around them by gr_plan_align_runs() (gr_plan.c): a run
 * crossing a boundary by at most greenreplica.boundary_slack is cut at it,
 * or, for reads, extended to the end of that track when that takes in the
 * track's other runs for less than their positionings.  Without an agent,
 * or on a layout without boundaries, nothing changes (logged at DEBUG1).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "greenreplica.h"
#include "gr_agent.h"
#include "gr_plan.h"
#include "gr_window.h"

/* The longest span the agent answers for (its MAX_RANGE_BYTES). */
#define GR_ALIGN_MAX_SPAN	((uint64) 16 << 30)

/*
 * The cost model of gr_plan_align_runs() in the unit of one positioning:
 * reading prefetch_merge_gap blocks costs as much as repositioning (that is
 * how the gap is set), so a byte costs 1 / (gap * BLCKSZ) of one.
 */
void
gr_align_params(GrAlignParams *params, bool may_extend)
{
	params->slack = (uint64) gr_boundary_slack_kb * 1024;
	params->may_extend = may_extend && gr_prefetch_merge_gap > 0;
	params->reposition_s = 1.0;
	params->byte_s = gr_prefetch_merge_gap > 0 ?
		1.0 / ((double) gr_prefetch_merge_gap * BLCKSZ) : 1.0;
}

/*
 * Fetch the boundaries over the hint's span into the window, and align the
 * hint's extents the way PREFETCH will align its reads.
 */
void
gr_align_window(GrWindow *window, GrHintExtents *hint)
{
	uint64		first = PG_UINT64_MAX;
	uint64		last = 0;
	uint64		complete_to;
	uint64	   *bounds;
	int			nbounds;
	bool		aligned;
	char		err[GR_MESSAGE_LEN];
	MemoryContext oldcontext;

	window->bounds = NULL;
	window->nbounds = 0;
	if (gr_boundary_slack_kb == 0 || hint->count == 0)
		return;
	for (int i = 0; i < hint->count; i++)
	{
		first = Min(first, hint->extents[i].offset);
		last = Max(last, hint->extents[i].offset + hint->extents[i].length);
	}
	if (last <= first)
		return;

	/*
	 * A truncated hint does not reach the end of the window's reads: ask up
	 * to the volume's end then (the agent caps the answer; PREFETCH aligns
	 * only where the list is complete).
	 */
	if (hint->truncated)
	{
		uint64		capacity;

		if (gr_agent_volume_capacity(&capacity, err, sizeof(err)) && capacity > first)
			last = Max(last, capacity);
	}

	oldcontext = MemoryContextSwitchTo(window->cxt);
	if (!gr_agent_boundaries(first, Min(last - first, GR_ALIGN_MAX_SPAN), &bounds,
							 &nbounds, &complete_to, &aligned, err, sizeof(err)))
	{
		ereport(DEBUG1,
				(errmsg_internal("greenreplica: no volume boundaries for the window: %s", err)));
		MemoryContextSwitchTo(oldcontext);
		return;
	}
	if (!aligned || nbounds == 0)
	{
		ereport(DEBUG1,
				(errmsg_internal("greenreplica: the volume's layout has no boundaries to align to")));
		MemoryContextSwitchTo(oldcontext);
		return;
	}
	window->bounds = bounds;
	window->nbounds = nbounds;

	/* The hint: the same rule as the reads, extending only where they do. */
	{
		GrRun	   *in = palloc(sizeof(GrRun) * hint->count);
		GrRun	   *out = palloc(sizeof(GrRun) * 3 * (Size) hint->count);
		GrAlignParams params;
		GrAlignCounts counts;
		size_t		n;

		for (int i = 0; i < hint->count; i++)
		{
			in[i].offset = hint->extents[i].offset;
			in[i].length = hint->extents[i].length;
			in[i].key = 0;
		}
		gr_align_params(&params, gr_prefetch_method == GR_PREFETCH_OS_CACHE);
		n = gr_plan_align_runs(in, hint->count, bounds, nbounds, &params,
							   out, 3 * (Size) hint->count, &counts);
		if (n <= GR_HINT_MAX_EXTENTS)
		{
			hint->extents = repalloc(hint->extents, sizeof(GrExtent) * Max(n, 1));
			for (size_t i = 0; i < n; i++)
			{
				hint->extents[i].offset = out[i].offset;
				hint->extents[i].length = out[i].length;
			}
			hint->count = (int) n;
		}
		ereport(DEBUG1,
				(errmsg_internal("greenreplica: %d volume boundaries up to " UINT64_FORMAT "; hint extents crossing one: " UINT64_FORMAT " -> " UINT64_FORMAT " (%d extents, " UINT64_FORMAT " cut, " UINT64_FORMAT " extended)",
								 nbounds, complete_to, counts.crossings_before,
								 counts.crossings_after, hint->count,
								 counts.cut, counts.extended)));
		pfree(in);
		pfree(out);
	}
	MemoryContextSwitchTo(oldcontext);
}
