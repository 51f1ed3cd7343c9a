/*-------------------------------------------------------------------------
 *
 * gr_flush.c
 *	  End-of-batch write-back: every dirty buffer, in physical order, then
 *	  a sync of the data filesystems.
 *
 * Unless a batch carries its dirty buffers (greenreplica.carry_dirty_buffers,
 * decided in gr_worker.c), nothing is left dirty when the data volume goes
 * to sleep, or the background writer would trickle it out and wake the
 * volume.  A
 * restartpoint does this when the window ended at a checkpoint record;
 * otherwise PostgreSQL would skip it, so the scheduler writes the dirty
 * buffers itself, sorted by (tablespace, database, relation, fork, block)
 * as the checkpointer sorts them, and then syncs each filesystem that holds
 * data.  Buffers are only pinned if they still hold the block they held
 * when scanned (ReadRecentBuffer): no reads are ever issued here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/fd.h"
#include "storage/smgr.h"
#include "utils/memutils.h"

#include "greenreplica.h"
#include "gr_fold.h"

/* Publish the write-back's progress every so many buffers (one spinlock each). */
#define GR_FLUSH_PROGRESS_EVERY 64

typedef struct GrDirtyBuffer
{
	GrBlockKey	key;			/* the tag in the fold's physical order */
	BufferTag	tag;
	int			buf_id;
} GrDirtyBuffer;

/* The same physical order as the window's block sets (gr_fold.c). */
static int
gr_dirty_buffer_cmp(const void *a, const void *b)
{
	return gr_block_key_cmp(&((const GrDirtyBuffer *) a)->key,
							&((const GrDirtyBuffer *) b)->key);
}

/*
 * Write every dirty buffer in physical order; returns how many were
 * written.  The caller provides a resource owner for the pins.
 */
static int
gr_flush_dirty_buffers_sorted(void)
{
	GrDirtyBuffer *dirty;
	int			capacity = 1024;
	int			ndirty = 0;
	int			written = 0;
	int			i;

	dirty = palloc(capacity * sizeof(GrDirtyBuffer));

	for (i = 0; i < NBuffers; i++)
	{
		BufferDesc *desc = GetBufferDescriptor(i);
		uint32		buf_state;

		/* An unlocked peek first: most buffers are clean. */
		if (!(pg_atomic_read_u32(&desc->state) & BM_DIRTY))
			continue;

		buf_state = LockBufHdr(desc);
		if ((buf_state & (BM_DIRTY | BM_VALID)) == (BM_DIRTY | BM_VALID))
		{
			if (ndirty == capacity)
			{
				capacity *= 2;
				dirty = repalloc_huge(dirty, capacity * sizeof(GrDirtyBuffer));
			}
			dirty[ndirty].tag = desc->tag;
			dirty[ndirty].key.spc = desc->tag.rnode.spcNode;
			dirty[ndirty].key.db = desc->tag.rnode.dbNode;
			dirty[ndirty].key.rel = desc->tag.rnode.relNode;
			dirty[ndirty].key.fork = desc->tag.forkNum;
			dirty[ndirty].key.block = desc->tag.blockNum;
			dirty[ndirty].buf_id = i;
			ndirty++;
		}
		UnlockBufHdr(desc, buf_state);
	}

	qsort(dirty, ndirty, sizeof(GrDirtyBuffer), gr_dirty_buffer_cmp);
	gr_set_step_progress(0, (double) ndirty);

	for (i = 0; i < ndirty; i++)
	{
		Buffer		buffer = dirty[i].buf_id + 1;

		/* Evicted or replaced since the scan: someone else wrote it. */
		if (!ReadRecentBuffer(dirty[i].tag.rnode, dirty[i].tag.forkNum,
							  dirty[i].tag.blockNum, buffer))
			continue;

		LockBuffer(buffer, BUFFER_LOCK_SHARE);
		FlushOneBuffer(buffer);
		UnlockReleaseBuffer(buffer);
		written++;
		if (written % GR_FLUSH_PROGRESS_EVERY == 0)
			gr_set_step_progress((double) (i + 1), (double) ndirty);
	}

	pfree(dirty);
	return written;
}

/* syncfs() the filesystem holding path, once per device. */
static void
gr_sync_filesystem_of(const char *path, dev_t *synced, int *nsynced, int max)
{
	struct stat st;
	int			fd;
	int			i;

	if (stat(path, &st) != 0)
		return;
	for (i = 0; i < *nsynced; i++)
	{
		if (synced[i] == st.st_dev)
			return;
	}

	fd = OpenTransientFile(path, O_RDONLY);
	if (fd < 0)
	{
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not open \"%s\" to sync its filesystem: %m", path)));
		return;
	}
	/*
	 * A failed sync may have dropped dirty pages the kernel will not write
	 * again: PostgreSQL PANICs on a failed data sync (data_sync_retry =
	 * off), and so do we, rather than spinning the volume down as if the
	 * batch were durable.
	 */
	if (syncfs(fd) != 0)
		ereport(data_sync_elevel(ERROR),
				(errcode_for_file_access(),
				 errmsg("could not sync the filesystem of \"%s\": %m", path)));
	CloseTransientFile(fd);

	if (*nsynced < max)
		synced[(*nsynced)++] = st.st_dev;
}

/*
 * Make the data durable on every filesystem that holds relations: the one
 * under base/ and those of the tablespaces, each synced once.
 */
static void
gr_sync_data_filesystems(void)
{
	dev_t		synced[64];
	int			nsynced = 0;
	DIR		   *dir;
	struct dirent *de;
	char		path[MAXPGPATH];

	gr_sync_filesystem_of("base", synced, &nsynced, lengthof(synced));

	dir = AllocateDir("pg_tblspc");
	while ((de = ReadDir(dir, "pg_tblspc")) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "pg_tblspc/%s", de->d_name);
		gr_sync_filesystem_of(path, synced, &nsynced, lengthof(synced));
	}
	FreeDir(dir);
}

/*
 * Write back everything the buffer pool holds dirty, in physical order, and
 * make it durable, so that nothing is left for the background writer or the
 * kernel to write while the volume sleeps.  Returns the buffers written.
 */
int
gr_write_back(void)
{
	int			written = gr_flush_dirty_buffers_sorted();

	gr_sync_data();
	return written;
}

/*
 * Sync the data filesystems without writing buffers: when a batch carries its
 * dirty buffers, what the startup process evicted during APPLY still sits in
 * the kernel's page cache, and its own write-back would wake the volume.
 */
void
gr_sync_data(void)
{
	gr_sync_data_filesystems();

	/*
	 * The scheduler holds no PGPROC barrier slot: close every relation file
	 * it opened (prefetch, write-back), so that the files of a dropped
	 * relation or database do not stay pinned until the next batch.
	 */
	smgrcloseall();
}

/* Buffers dirty now (an unlocked peek at each header: a count, not a list). */
int
gr_count_dirty_buffers(void)
{
	int			dirty = 0;

	for (int i = 0; i < NBuffers; i++)
	{
		if (pg_atomic_read_u32(&GetBufferDescriptor(i)->state) & BM_DIRTY)
			dirty++;
	}
	return dirty;
}
