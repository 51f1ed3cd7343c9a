/*-------------------------------------------------------------------------
 *
 * gr_wake_window.c
 *	  What a decoded window will do to the data volume, for the batch's
 *	  wake (gr_wake.c decides): the reads it still needs after the
 *	  filters, and the extents its write-back writes.
 *
 * A block that needs a read (its first reference in the window is neither
 * an image nor an init) is no read of the volume when it is in shared
 * buffers now, in the OS page cache now (preadv2 with RWF_NOWAIT answers
 * without I/O), or past its relation's current end (redo extends the file).
 * Only file metadata is looked at for the last, which the kernel keeps.  A
 * block found now may be evicted before redo reaches it: redo then reads
 * it, and the agent wakes what that read needs.  That costs a spin-up,
 * never correctness: the wake decides power, not what redo reads.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/relpath.h"
#include "storage/block.h"
#include "storage/fd.h"
#include "storage/relfilenode.h"

#include "gr_wake.h"
#include "gr_window.h"

/* Whether one block of an open segment file needs no read of the volume. */
static bool
gr_count_block(int fd, off_t size, const GrBlockKey *key, char *page,
			   GrWakeInputs *in)
{
	off_t		offset = (off_t) (key->block % RELSEG_SIZE) * BLCKSZ;
	struct iovec iov;

	if (offset >= size)
	{
		in->past_end++;
		return true;
	}
	iov.iov_base = page;
	iov.iov_len = BLCKSZ;
	if (preadv2(fd, &iov, 1, offset, RWF_NOWAIT) != BLCKSZ)
		return false;
	in->in_os_cache++;
	return true;
}

/*
 * Open the segment file of key's fork and stat it; -1 when it cannot be
 * opened, with *missing set when it does not exist (the window creates it).
 */
static int
gr_open_segment(const GrBlockKey *key, BlockNumber segno, struct stat *st,
				bool *missing)
{
	RelFileNode rnode;
	char	   *path;
	char	   *segpath;
	int			fd;

	*missing = false;
	if (key->fork < 0 || key->fork > MAX_FORKNUM)
		return -1;
	rnode.spcNode = key->spc;
	rnode.dbNode = key->db;
	rnode.relNode = key->rel;
	path = relpathperm(rnode, (ForkNumber) key->fork);
	segpath = segno > 0 ? psprintf("%s.%u", path, segno) : path;
	/* counted against max_files_per_process, closed on error */
	fd = OpenTransientFile(segpath, O_RDONLY | PG_BINARY);
	*missing = fd < 0 && errno == ENOENT;
	if (fd >= 0 && fstat(fd, st) != 0)
	{
		CloseTransientFile(fd);
		fd = -1;
	}
	if (segpath != path)
		pfree(segpath);
	pfree(path);
	return fd;
}

/*
 * Count the window's reads and where they would be served from, up to the
 * first block that needs a read of the volume (one decides the wake).
 * Runs in the scheduler while replay is paused at the window start.
 */
void
gr_window_wake_inputs(GrWindow *window, GrWakeInputs *in)
{
	const GrBlockKey *blocks;
	uint64		n = gr_window_sorted_reads(window, &blocks);
	char	   *page = MemoryContextAlloc(window->cxt, BLCKSZ);
	uint64		i = 0;
	bool		read_found = false;

	memset(in, 0, sizeof(*in));
	in->decoded_whole = !window->split && !window->aborted && !window->incomplete;
	in->split_on_reads = window->split && !window->aborted && !window->incomplete;
	in->reads_needed = n;
	in->write_extents_complete = true;

	while (i < n && !read_found)
	{
		BlockNumber segno = blocks[i].block / RELSEG_SIZE;
		uint64		file_end = i;
		int			fd = -1;
		struct stat st;
		bool		missing = false;
		bool		opened = false;

		/* The blocks of this segment file: [i, file_end). */
		while (file_end < n && blocks[file_end].spc == blocks[i].spc &&
			   blocks[file_end].db == blocks[i].db &&
			   blocks[file_end].rel == blocks[i].rel &&
			   blocks[file_end].fork == blocks[i].fork &&
			   blocks[file_end].block / RELSEG_SIZE == segno)
			file_end++;

		for (uint64 j = i; j < file_end; j++)
		{
			/* In shared buffers: no file needed. */
			if (gr_block_in_shared_buffers(&blocks[j]))
			{
				in->in_shared_buffers++;
				continue;
			}
			if (!opened)
			{
				opened = true;
				fd = gr_open_segment(&blocks[i], segno, &st, &missing);
			}
			if (missing)
				in->past_end++;
			else if (fd < 0 || !gr_count_block(fd, st.st_size, &blocks[j], page, in))
			{
				/* One read decides: the counts stop here. */
				read_found = true;
				break;
			}
		}
		if (fd >= 0)
			CloseTransientFile(fd);
		i = file_end;
	}
	pfree(page);
}
