/*-------------------------------------------------------------------------
 *
 * gr_hint.c
 *	  The window's volume extents, for the storage agent's "hint" op.
 *
 * Before PREFETCH the scheduler tells the agent which byte ranges of the
 * data volume the window will read, so that a layout can wake only the
 * members that hold them (or rebuild those zones first).  The ranges are
 * volume offsets: for each run of blocks that need a read, the relation
 * segment file's physical extents come from the filesystem (FIEMAP).  The
 * filesystem of a tablespace on an agent volume sits directly on the
 * volume's device, so its physical offsets are the volume's.  Files on the
 * filesystem that holds pg_wal are not hinted: by design that is the
 * always-on log volume, not the agent's.  Ranges the filesystem has not
 * allocated yet (delayed allocation) or cannot map are left out.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fiemap.h>
#include <linux/fs.h>

#include "access/xlog_internal.h"
#include "common/relpath.h"
#include "storage/block.h"
#include "storage/fd.h"
#include "storage/relfilenode.h"
#include "utils/memutils.h"

#include "gr_window.h"

/* Extents asked of the filesystem per run. */
#define GR_HINT_FIEMAP_EXTENTS	32

static void
gr_hint_append(GrHintExtents *hint, uint64 offset, uint64 length)
{
	if (hint->count > 0)
	{
		GrExtent   *last = &hint->extents[hint->count - 1];

		if (last->offset + last->length == offset)
		{
			last->length += length;
			return;
		}
	}
	if (hint->count >= GR_HINT_MAX_EXTENTS)
	{
		hint->truncated = true;
		return;
	}
	hint->extents[hint->count].offset = offset;
	hint->extents[hint->count].length = length;
	hint->count++;
}

/*
 * The physical extents of bytes [start, start + length) of an open file,
 * appended to hint (also the tablespace temperatures' map, gr_temperature.c).
 * Returns the bytes it could not map: FIEMAP failed, or the filesystem has
 * not allocated them yet (delayed allocation), or their offsets are not the
 * device's (inline, encoded, unaligned data); a hole is no such byte.
 */
uint64
gr_hint_map(int fd, uint64 start, uint64 length, GrHintExtents *hint)
{
	union
	{
		struct fiemap map;
		char		space[sizeof(struct fiemap) +
						  GR_HINT_FIEMAP_EXTENTS * sizeof(struct fiemap_extent)];
	}			u;
	uint64		end = start + length;
	uint64		unmapped = 0;
	uint32		i;

	while (start < end)
	{
		memset(&u, 0, sizeof(u));
		u.map.fm_start = start;
		u.map.fm_length = end - start;
		u.map.fm_extent_count = GR_HINT_FIEMAP_EXTENTS;
		if (ioctl(fd, FS_IOC_FIEMAP, &u.map) != 0)
			return unmapped + (end - start);
		if (u.map.fm_mapped_extents == 0)
			return unmapped;	/* a hole to the end */

		for (i = 0; i < u.map.fm_mapped_extents; i++)
		{
			struct fiemap_extent *e = &u.map.fm_extents[i];
			uint64		from = Max(start, e->fe_logical);
			uint64		to = Min(end, e->fe_logical + e->fe_length);

			if (to <= from)
				continue;
			if ((e->fe_flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC |
								FIEMAP_EXTENT_ENCODED | FIEMAP_EXTENT_DATA_INLINE |
								FIEMAP_EXTENT_NOT_ALIGNED)) == 0)
				gr_hint_append(hint, e->fe_physical + (from - e->fe_logical), to - from);
			else
				unmapped += to - from;
			start = to;
			if (e->fe_flags & FIEMAP_EXTENT_LAST)
				return unmapped;
		}
		if (u.map.fm_mapped_extents < GR_HINT_FIEMAP_EXTENTS)
			return unmapped;
	}
	return unmapped;
}

/*
 * The volume extents of the sorted blocks, merged, in their order.
 * Allocated in the window's context.
 */
static void
gr_hint_blocks(GrWindow *window, const GrBlockKey *blocks, uint64 n,
			   GrHintExtents *hint)
{
	uint64		i = 0;
	struct stat st;
	dev_t		wal_dev;

	hint->count = 0;
	hint->files = 0;
	hint->truncated = false;
	hint->extents = MemoryContextAlloc(window->cxt,
									   sizeof(GrExtent) * GR_HINT_MAX_EXTENTS);
	if (stat(XLOGDIR, &st) != 0)
		return;
	wal_dev = st.st_dev;

	while (i < n && !hint->truncated)
	{
		RelFileNode rnode;
		BlockNumber segno = blocks[i].block / RELSEG_SIZE;
		uint64		file_end = i;
		char	   *path;
		char	   *segpath;
		int			fd;

		/* The blocks of this segment file: [i, file_end). */
		while (file_end < n && blocks[file_end].spc == blocks[i].spc &&
			   blocks[file_end].db == blocks[i].db &&
			   blocks[file_end].rel == blocks[i].rel &&
			   blocks[file_end].fork == blocks[i].fork &&
			   blocks[file_end].block / RELSEG_SIZE == segno)
			file_end++;

		rnode.spcNode = blocks[i].spc;
		rnode.dbNode = blocks[i].db;
		rnode.relNode = blocks[i].rel;
		if (blocks[i].fork < 0 || blocks[i].fork > MAX_FORKNUM)
		{
			i = file_end;
			continue;
		}
		path = relpathperm(rnode, (ForkNumber) blocks[i].fork);
		segpath = segno > 0 ? psprintf("%s.%u", path, segno) : path;
		/* counted against max_files_per_process, closed on error */
		fd = OpenTransientFile(segpath, O_RDONLY);
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev != wal_dev)
		{
			hint->files++;
			while (i < file_end && !hint->truncated)
			{
				uint64		run_end = i + 1;

				while (run_end < file_end &&
					   gr_block_key_follows(&blocks[run_end - 1], &blocks[run_end]))
					run_end++;
				gr_hint_map(fd, (uint64) (blocks[i].block % RELSEG_SIZE) * BLCKSZ,
							(uint64) (run_end - i) * BLCKSZ, hint);
				i = run_end;
			}
		}
		if (fd >= 0)
			CloseTransientFile(fd);
		i = file_end;
	}
}

/*
 * The volume extents of the window's blocks that need a read, merged and
 * in the order PREFETCH reads them.  Allocated in the window's context.
 */
void
gr_window_hint_extents(GrWindow *window, GrHintExtents *hint)
{
	const GrBlockKey *blocks;
	uint64		n = gr_window_sorted_reads(window, &blocks);

	gr_hint_blocks(window, blocks, n, hint);
}

/*
 * The volume extents of every block the window touches, which its
 * write-back writes (a write-only window's wake, gr_wake_window.c).
 * Blocks the filesystem has not allocated yet are left out: where they
 * land is the filesystem's choice.  Allocated in the window's context.
 */
void
gr_window_write_extents(GrWindow *window, GrHintExtents *hint)
{
	GrBlockKey *blocks = MemoryContextAllocHuge(window->cxt, sizeof(GrBlockKey) *
												Max(window->fold.distinct, 1));
	uint64		n = gr_fold_collect_blocks(&window->fold, blocks);

	gr_hint_blocks(window, blocks, n, hint);
	pfree(blocks);
}

/*
 * The volume offset of byte "offset" of an open file, from its extent map;
 * PG_UINT64_MAX when the filesystem cannot say (not allocated yet, inline,
 * or no FIEMAP).  Orders PREFETCH's read ranges physically.
 */
uint64
gr_physical_offset(int fd, uint64 offset)
{
	union
	{
		struct fiemap map;
		char		space[sizeof(struct fiemap) + sizeof(struct fiemap_extent)];
	}			u;
	struct fiemap_extent *e = &u.map.fm_extents[0];

	memset(&u, 0, sizeof(u));
	u.map.fm_start = offset;
	u.map.fm_length = BLCKSZ;
	u.map.fm_extent_count = 1;
	if (ioctl(fd, FS_IOC_FIEMAP, &u.map) != 0 || u.map.fm_mapped_extents == 0 ||
		offset < e->fe_logical || offset >= e->fe_logical + e->fe_length ||
		(e->fe_flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC |
						FIEMAP_EXTENT_ENCODED | FIEMAP_EXTENT_DATA_INLINE |
						FIEMAP_EXTENT_NOT_ALIGNED)) != 0)
		return PG_UINT64_MAX;
	return e->fe_physical + (offset - e->fe_logical);
}
