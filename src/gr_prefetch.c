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
 * With greenreplica.prefetch_method = os_cache the window's whole
 * read set is staged in the OS page cache instead: per segment file the
 * needed blocks are merged into ranges across gaps of up to
 * greenreplica.prefetch_merge_gap blocks, the ranges are sorted by their
 * volume offset (FIEMAP), announced all at once with posix_fadvise(WILLNEED)
 * (so the kernel has every request in flight), and then read once more with
 * pread() in the same order, which only waits for the readahead to land.
 * Redo then finds its pages in the page cache.  Shared buffers are not
 * touched, so a window is bounded by a share of RAM, not of shared_buffers.
 * Blocks already in shared buffers (left there by the previous batch) are
 * left out of the read set first, as PrefetchSharedBuffer() leaves them out
 * on the buffers path: redo finds them in the pool, and the merged ranges
 * may read through them as a gap, never for them.
 * The gap blocks read through are pages redo does not need; they are read
 * as they are on disk into the page cache only, which changes nothing redo
 * sees.
 *
 * Promotion wins: the abort check is polled between runs (and within long
 * ones), and the prefetch stops at once when it says so.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/relpath.h"
#include "storage/fd.h"
#include "portability/instr_time.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "utils/memutils.h"

#include "greenreplica.h"
#include "gr_plan.h"
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
 * Copy blocks[0 .. n) to out, without those in shared buffers now (counted
 * as cached); returns how many were copied.  A block found now may be
 * evicted before redo reaches it; redo then reads it itself.  That is a
 * cost, never a correctness issue: the read set only warms caches, and
 * nothing here changes what redo reads or writes.
 */
static uint64
gr_drop_resident(const GrBlockKey *blocks, uint64 n, GrBlockKey *out,
				 GrPrefetchResult *result)
{
	uint64		kept = 0;

	for (uint64 i = 0; i < n; i++)
	{
		if (!gr_debug_prefetch_resident &&
			gr_block_in_shared_buffers(&blocks[i]))
			result->blocks_cached++;
		else
			out[kept++] = blocks[i];
	}
	return kept;
}

/* os_cache: one merged read range of one segment file. */
typedef struct GrOsRange
{
	int			file;			/* index into the segment paths */
	uint64		offset;			/* bytes, within the segment file */
	uint64		length;
	uint64		physical;		/* volume offset; PG_UINT64_MAX unknown */
	uint32		needed;			/* needed blocks in the range */
} GrOsRange;

/* Physical order; ranges the filesystem cannot place go last, in file order. */
static int
gr_os_range_cmp(const void *a, const void *b)
{
	const GrOsRange *x = a;
	const GrOsRange *y = b;

	if (x->physical != y->physical)
		return x->physical < y->physical ? -1 : 1;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return 0;
}

/*
 * The physically sorted ranges aligned to the volume's boundaries (see
 * gr_align.c): the ranges the filesystem could place become runs keyed by
 * file and physical-minus-logical delta, so that an extension only takes in
 * ranges it really reads through; each aligned run is read from the file of
 * the range it starts in.  Returns the new count; *ranges may be replaced.
 */
static uint64
gr_prefetch_align(const GrWindow *window, GrOsRange **ranges, uint64 nranges,
				  GrPrefetchResult *result)
{
	GrOsRange  *in = *ranges;
	uint64		placed = 0;
	GrRun	   *runs;
	GrRun	   *out;
	GrOsRange  *aligned;
	uint32	   *left;
	GrAlignParams params;
	GrAlignCounts counts;
	size_t		n;
	uint64		src = 0;

	if (window->nbounds == 0 || gr_boundary_slack_kb == 0)
		return nranges;
	while (placed < nranges && in[placed].physical != PG_UINT64_MAX)
		placed++;
	if (placed == 0)
		return nranges;

	runs = palloc(sizeof(GrRun) * placed);
	out = palloc(sizeof(GrRun) * 3 * placed);
	for (uint64 r = 0; r < placed; r++)
	{
		runs[r].offset = in[r].physical;
		runs[r].length = in[r].length;
		runs[r].key = ((int64) in[r].file << 32) ^
			(int64) (((in[r].physical - in[r].offset) / BLCKSZ) & 0xffffffff);
	}
	gr_align_params(&params, true);
	n = gr_plan_align_runs(runs, placed, window->bounds, window->nbounds, &params,
						   out, 3 * placed, &counts);
	result->crossings_before += counts.crossings_before;
	result->crossings_after += counts.crossings_after;
	result->aligned_cuts += counts.cut;
	result->aligned_extensions += counts.extended;

	/* Back to file ranges; needed blocks go to the first pieces of their range. */
	aligned = palloc(sizeof(GrOsRange) * (n + (nranges - placed) + 1));
	left = palloc(sizeof(uint32) * placed);
	for (uint64 r = 0; r < placed; r++)
		left[r] = in[r].needed;
	for (size_t k = 0; k < n; k++)
	{
		GrOsRange  *o = &aligned[k];
		uint64		seg_bytes = (uint64) RELSEG_SIZE * BLCKSZ;
		uint32		blocks;

		while (src + 1 < placed && in[src].physical + in[src].length <= out[k].offset)
			src++;
		o->file = in[src].file;
		o->physical = out[k].offset;
		o->offset = in[src].offset + (out[k].offset - in[src].physical);
		o->length = Min(out[k].length, seg_bytes - Min(o->offset, seg_bytes));
		blocks = (uint32) (o->length / BLCKSZ);
		o->needed = 0;
		/* the ranges this piece starts in or takes in */
		for (uint64 r = src; r < placed && in[r].physical < out[k].offset + out[k].length; r++)
		{
			uint32		take = Min(left[r], blocks - o->needed);

			o->needed += take;
			left[r] -= take;
		}
	}
	for (uint64 r = placed; r < nranges; r++)
		aligned[n + (r - placed)] = in[r];
	pfree(runs);
	pfree(out);
	pfree(left);
	pfree(in);
	*ranges = aligned;
	return n + (nranges - placed);
}

/* Bytes read per pread() while waiting for the readahead. */
#define GR_OS_CACHE_CHUNK		(256 * 1024)

/*
 * The most blocks a window may need to read with os_cache: a quarter of
 * physical memory, so that the staged pages are still cached when redo
 * reaches them.
 */
static uint64
gr_os_cache_max_reads(void)
{
	long		pages = sysconf(_SC_PHYS_PAGES);
	long		page_size = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || page_size <= 0)
		return (uint64) NBuffers / 4;
	return Max((uint64) pages / 4 * (uint64) page_size / BLCKSZ, (uint64) NBuffers / 4);
}

/* How many blocks needing a read one window may hold, per read path. */
uint64
gr_prefetch_max_reads(void)
{
	return gr_prefetch_method == GR_PREFETCH_OS_CACHE ?
		gr_os_cache_max_reads() : gr_window_max_reads();
}

/*
 * Open path (one of the segment files) unless fd already holds it; -1 if it
 * cannot be opened (dropped meanwhile: redo's business).
 */
static int
gr_os_reopen(int *open_file, int fd, int file, char **paths)
{
	if (*open_file == file)
		return fd;
	if (fd >= 0)
		CloseTransientFile(fd);
	*open_file = file;
	fd = OpenTransientFile(paths[file], O_RDONLY | PG_BINARY);
	return fd;
}

/*
 * The next relation fork of the sorted block list, from *i, whose file exists:
 * its blocks are [*i, *file_end) and *smgr opens it.  A fork created later in
 * the window, or dropped already, is redo's business: its blocks are counted as
 * skipped and passed over.  False at the end of the list or when the batch is
 * to stop (result->aborted set).
 */
static bool
gr_next_fork(const GrBlockKey *blocks, uint64 n, uint64 *i,
			 GrPrefetchResult *result, GrAbortCheck abort_check,
			 RelFileNode *rnode, SMgrRelation *smgr, uint64 *file_end)
{
	while (*i < n && !result->aborted)
	{
		ForkNumber	fork = (ForkNumber) blocks[*i].fork;
		uint64		end = *i;

		while (end < n && gr_same_file(&blocks[*i], &blocks[end]))
			end++;
		if (abort_check())
		{
			result->aborted = true;
			return false;
		}
		rnode->spcNode = blocks[*i].spc;
		rnode->dbNode = blocks[*i].db;
		rnode->relNode = blocks[*i].rel;
		*smgr = smgropen(*rnode, InvalidBackendId);
		if (fork < 0 || fork > MAX_FORKNUM || fork == INIT_FORKNUM ||
			!smgrexists(*smgr, fork))
		{
			result->blocks_skipped += end - *i;
			*i = end;
			continue;
		}
		*file_end = end;
		return true;
	}
	return false;
}

/*
 * The os_cache read path: plan the merged ranges of every segment file,
 * sort them physically, announce them all, then wait for them in order.
 */
static void
gr_prefetch_os_cache(const GrWindow *window, const GrBlockKey *blocks, uint64 n,
					 GrPrefetchResult *result, GrAbortCheck abort_check)
{
	GrOsRange  *ranges = palloc(sizeof(GrOsRange) * Max(n, 1));
	GrBlockRange *merged = palloc(sizeof(GrBlockRange) * Max(n, 1));
	GrBlockKey *missing = palloc(sizeof(GrBlockKey) * Max(n, 1));
	char	  **paths = palloc(sizeof(char *) * Max(n, 1));
	char	   *chunk = palloc(GR_OS_CACHE_CHUNK);
	uint64		nranges = 0;
	int			nfiles = 0;
	uint64		i = 0;
	uint64		r;
	int			fd = -1;
	int			open_file = -1;
	RelFileNode rnode;
	SMgrRelation smgr;
	uint64		file_end;

	/* Plan: the ranges of each segment file, below the fork's current end. */
	while (gr_next_fork(blocks, n, &i, result, abort_check, &rnode, &smgr, &file_end))
	{
		ForkNumber	fork = (ForkNumber) blocks[i].fork;
		BlockNumber nblocks = smgrnblocks(smgr, fork);
		char	   *path = relpathperm(rnode, fork);

		while (i < file_end)
		{
			BlockNumber segno = blocks[i].block / RELSEG_SIZE;
			uint64		seg_end = i;
			uint64		nmerged;
			uint64		nmissing;
			uint64		m;
			int			segfd;

			if (blocks[i].block >= nblocks)
			{
				/* Past the current end: the window extends the file. */
				result->blocks_skipped += file_end - i;
				i = file_end;
				break;
			}
			while (seg_end < file_end && blocks[seg_end].block < nblocks &&
				   blocks[seg_end].block / RELSEG_SIZE == segno)
				seg_end++;

			nmissing = gr_drop_resident(&blocks[i], seg_end - i, missing, result);
			if (nmissing == 0)
			{
				i = seg_end;
				continue;
			}
			paths[nfiles] = segno > 0 ? psprintf("%s.%u", path, segno) : pstrdup(path);
			segfd = OpenTransientFile(paths[nfiles], O_RDONLY | PG_BINARY);
			if (segfd < 0)
			{
				pfree(paths[nfiles]);
				result->blocks_skipped += nmissing;
				i = seg_end;
				continue;
			}
			nmerged = gr_merge_ranges(missing, nmissing,
									  (uint32) gr_prefetch_merge_gap, merged);
			for (m = 0; m < nmerged; m++)
			{
				GrOsRange  *o = &ranges[nranges++];

				o->file = nfiles;
				o->offset = (uint64) (merged[m].first % RELSEG_SIZE) * BLCKSZ;
				o->length = (uint64) merged[m].nblocks * BLCKSZ;
				o->needed = merged[m].needed;
				o->physical = gr_physical_offset(segfd, o->offset);
			}
			CloseTransientFile(segfd);
			nfiles++;
			i = seg_end;
		}
	}

	qsort(ranges, nranges, sizeof(GrOsRange), gr_os_range_cmp);
	nranges = gr_prefetch_align(window, &ranges, nranges, result);

	/* Announce: every range in flight at once, in physical order. */
	for (r = 0; r < nranges && !result->aborted; r++)
	{
		if (r % GR_PREFETCH_CHECK_EVERY == 0 && abort_check())
		{
			result->aborted = true;
			break;
		}
		fd = gr_os_reopen(&open_file, fd, ranges[r].file, paths);
		if (fd >= 0)
			(void) posix_fadvise(fd, (off_t) ranges[r].offset,
								 (off_t) ranges[r].length, POSIX_FADV_WILLNEED);
	}

	/* Wait: read each range once more, which returns as its pages land. */
	for (r = 0; r < nranges && !result->aborted; r++)
	{
		uint64		done = 0;

		if (abort_check())
		{
			result->aborted = true;
			break;
		}
		fd = gr_os_reopen(&open_file, fd, ranges[r].file, paths);
		if (fd < 0)
			continue;
		while (done < ranges[r].length)
		{
			ssize_t		got = pg_pread(fd, chunk,
									   Min(ranges[r].length - done, GR_OS_CACHE_CHUNK),
									   (off_t) (ranges[r].offset + done));

			/* A short file (truncated meanwhile) or an error: redo will see. */
			if (got <= 0)
				break;
			done += got;
		}
		result->ios++;
		result->bytes += ranges[r].length;
		result->blocks_read += ranges[r].needed;
		result->gap_blocks += ranges[r].length / BLCKSZ - ranges[r].needed;
		gr_set_step_done((double) result->blocks_read);
	}
	if (fd >= 0)
		CloseTransientFile(fd);
	pfree(chunk);
	pfree(ranges);
	pfree(merged);
	pfree(missing);
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
	uint64		file_end;
	RelFileNode rnode;
	SMgrRelation smgr;
	instr_time	started;
	instr_time	took;

	memset(result, 0, sizeof(*result));
	INSTR_TIME_SET_CURRENT(started);

	n = gr_window_sorted_reads(window, &blocks);
	result->blocks_planned = n;

	/* The developer delay: once per prefetch, even an empty one. */
	if (!gr_prefetch_delay(abort_check))
		result->aborted = true;

	if (gr_prefetch_method == GR_PREFETCH_OS_CACHE && !result->aborted)
	{
		gr_prefetch_os_cache(window, blocks, n, result, abort_check);
		n = 0;					/* done: skip the buffers path below */
	}

	i = 0;
	while (gr_next_fork(blocks, n, &i, result, abort_check, &rnode, &smgr, &file_end))
	{
		ForkNumber	fork = (ForkNumber) blocks[i].fork;
		BlockNumber nblocks = smgrnblocks(smgr, fork);

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
			gr_set_step_done((double) (result->blocks_read + result->blocks_cached +
									   result->blocks_skipped));
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
			(double) (Max(result->blocks_read, result->ios) - result->ios) /
			(double) result->blocks_read;
	INSTR_TIME_SET_CURRENT(took);
	INSTR_TIME_SUBTRACT(took, started);
	result->seconds = INSTR_TIME_GET_DOUBLE(took);
	if (window->nbounds > 0)
		ereport(LOG,
				(errmsg("greenreplica prefetch aligned to %d volume boundaries: ranges crossing one " UINT64_FORMAT " -> " UINT64_FORMAT ", " UINT64_FORMAT " cut, " UINT64_FORMAT " extended to a track end, " UINT64_FORMAT " reads, " UINT64_FORMAT " gap blocks",
						window->nbounds, result->crossings_before,
						result->crossings_after, result->aligned_cuts,
						result->aligned_extensions, result->ios,
						result->gap_blocks)));
	MemoryContextSwitchTo(oldcontext);
}
