/*-------------------------------------------------------------------------
 *
 * gr_prefetch.c
 *	  The PREFETCH phase: read the window's blocks that need a read into
 *	  shared buffers, in physical order, before replay resumes.
 *
 * The blocks come sorted by (tablespace, database, relation, fork, block)
 * from the window's fold.  Each maximal run of consecutive blocks of one
 * file is first announced with PrefetchSharedBuffer() (posix_fadvise
 * WILLNEED where available, so the kernel can merge it into large reads)
 * and then read block by block with ReadBufferWithoutRelcache() and
 * released at once: the pages stay in shared buffers for APPLY.
 *
 * The window may create, extend, truncate or drop the relations it
 * touches, and replay is paused at the window start while this runs: a
 * relation fork that does not exist now is skipped, and so is every block
 * at or past the fork's current end.  Redo reads or creates those itself,
 * exactly as without compaction.  Nothing here changes what redo does; it
 * only warms the buffer pool.
 *
 * Promotion wins: the abort check is polled between runs (and within long
 * ones), and the prefetch stops at once when it says so.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/relpath.h"
#include "portability/instr_time.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "utils/memutils.h"

#include "greenreplica.h"
#include "gr_window.h"

/* Blocks read between two abort checks inside one long run. */
#define GR_PREFETCH_CHECK_EVERY		64

/* Slice of greenreplica.debug_prefetch_delay between two abort checks. */
#define GR_PREFETCH_DELAY_SLICE_MS	5

/* The developer delay; false if told to stop meanwhile. */
static bool
gr_prefetch_delay(GrAbortCheck abort_check)
{
	int			waited;

	for (waited = 0; waited < gr_debug_prefetch_delay_ms;
		 waited += GR_PREFETCH_DELAY_SLICE_MS)
	{
		if (abort_check())
			return false;
		pg_usleep(GR_PREFETCH_DELAY_SLICE_MS * 1000L);
	}
	return true;
}

static bool
gr_same_file(const GrBlockKey *a, const GrBlockKey *b)
{
	return a->spc == b->spc && a->db == b->db && a->rel == b->rel &&
		a->fork == b->fork;
}

/*
 * Read blocks[0 .. n) of one relation fork, all below its end, as one
 * run; counts merged I/Os (sub-runs of blocks not yet in shared buffers).
 */
static bool
gr_prefetch_run(SMgrRelation smgr, ForkNumber fork, const GrBlockKey *blocks,
				uint64 n, GrPrefetchResult *result, GrAbortCheck abort_check)
{
	uint64		i;
	bool		in_io = false;
	ReadBufferMode mode = fork == MAIN_FORKNUM ? RBM_NORMAL : RBM_ZERO_ON_ERROR;
	bool	   *missing = palloc(sizeof(bool) * n);

	/* Announce the whole run first, so that the kernel can merge it. */
	for (i = 0; i < n; i++)
	{
		PrefetchBufferResult pr = PrefetchSharedBuffer(smgr, fork, blocks[i].block);

		missing[i] = !BufferIsValid(pr.recent_buffer);
	}

	for (i = 0; i < n; i++)
	{
		Buffer		buf;

		if (i > 0 && i % GR_PREFETCH_CHECK_EVERY == 0 && abort_check())
		{
			pfree(missing);
			return false;
		}
		if (missing[i])
		{
			result->blocks_read++;
			result->bytes += BLCKSZ;
			if (!in_io)
				result->ios++;
			in_io = true;
		}
		else
		{
			result->blocks_cached++;
			in_io = false;
		}
		buf = ReadBufferWithoutRelcache(smgr->smgr_rnode.node, fork,
										blocks[i].block, mode, NULL, true);
		ReleaseBuffer(buf);
	}
	pfree(missing);
	return true;
}

/*
 * Prefetch the window's blocks that need a read.  Runs in the scheduler,
 * with its resource owner for the pins; allocates in the window's context.
 */
void
gr_prefetch_window(GrWindow *window, GrPrefetchResult *result,
				   GrAbortCheck abort_check)
{
	MemoryContext oldcontext = MemoryContextSwitchTo(window->cxt);
	const GrBlockKey *blocks;
	uint64		n;
	uint64		i;
	instr_time	started;
	instr_time	took;

	memset(result, 0, sizeof(*result));
	INSTR_TIME_SET_CURRENT(started);

	n = gr_window_sorted_reads(window, &blocks);
	result->blocks_planned = n;

	/* The developer delay: once per prefetch, even an empty one. */
	if (!gr_prefetch_delay(abort_check))
		result->aborted = true;

	i = 0;
	while (i < n && !result->aborted)
	{
		RelFileNode rnode;
		ForkNumber	fork = (ForkNumber) blocks[i].fork;
		SMgrRelation smgr;
		BlockNumber nblocks;
		uint64		file_end = i;

		/* The blocks of this relation fork: [i, file_end). */
		while (file_end < n && gr_same_file(&blocks[i], &blocks[file_end]))
			file_end++;

		if (abort_check())
		{
			result->aborted = true;
			break;
		}

		rnode.spcNode = blocks[i].spc;
		rnode.dbNode = blocks[i].db;
		rnode.relNode = blocks[i].rel;
		smgr = smgropen(rnode, InvalidBackendId);

		/* Created later in the window, or dropped already: redo's business. */
		if (fork < 0 || fork > MAX_FORKNUM || fork == INIT_FORKNUM ||
			!smgrexists(smgr, fork))
		{
			result->blocks_skipped += file_end - i;
			i = file_end;
			continue;
		}
		nblocks = smgrnblocks(smgr, fork);

		while (i < file_end)
		{
			uint64		run_end = i + 1;

			if (blocks[i].block >= nblocks)
			{
				/* Past the current end: the window extends the file. */
				result->blocks_skipped += file_end - i;
				i = file_end;
				break;
			}
			while (run_end < file_end &&
				   gr_block_key_follows(&blocks[run_end - 1], &blocks[run_end]) &&
				   blocks[run_end].block < nblocks)
				run_end++;

			if (!gr_prefetch_run(smgr, fork, &blocks[i], run_end - i, result, abort_check))
			{
				result->aborted = true;
				break;
			}
			i = run_end;
			if (i < file_end && abort_check())
			{
				result->aborted = true;
				break;
			}
		}
		if (result->aborted)
			break;
	}

	/* Keep no file of a relation the window may drop open. */
	smgrcloseall();

	if (result->blocks_read > 0)
		result->sequential_share =
			(double) (result->blocks_read - result->ios) / (double) result->blocks_read;
	INSTR_TIME_SET_CURRENT(took);
	INSTR_TIME_SUBTRACT(took, started);
	result->seconds = INSTR_TIME_GET_DOUBLE(took);
	MemoryContextSwitchTo(oldcontext);
}
