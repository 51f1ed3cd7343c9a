/*-------------------------------------------------------------------------
 *
 * gr_window.c
 *	  Decode a window of received WAL into its block set.
 *
 * The window runs from the replay position to the WAL received when the
 * batch began.  It is read from pg_wal (the log volume only) with the
 * xlogreader, in the scheduler process.  read_local_xlog_page() is of no
 * use here: in recovery it waits for the replay position, which is held at
 * the window start.  The page_read callback below reads segment files with
 * WALRead() and never reads past what the walreceiver has flushed.
 *
 * Every block reference of every record goes into the window's fold
 * (gr_fold.c), keyed by (tablespace, database, relation, fork, block).  A
 * reference that restores an applied full-page image or initializes the
 * page (BKPBLOCK_WILL_INIT) needs no read when it is the block's first.
 *
 * Memory is bounded: when the blocks needing a read would exceed what
 * shared buffers can hold without evicting prefetched pages before their
 * use, the window is split at the end of the last record that fits, and
 * APPLY stops there; the rest of the batch becomes the next window.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "catalog/pg_control.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "replication/walreceiver.h"
#include "storage/buf_internals.h"
#include "storage/lwlock.h"
#include "utils/memutils.h"

#include "gr_window.h"

/* Share of shared buffers the blocks of one window may take. */
#define GR_WINDOW_BUFFER_SHARE	4

/* Records decoded between two abort checks. */
#define GR_WINDOW_CHECK_EVERY	1024

/* Initial slots of the fold's hash table. */
#define GR_WINDOW_INITIAL_BLOCKS	256

typedef struct GrWindowReader
{
	TimeLineID	receive_tli;
	TimeLineID	replay_tli;
} GrWindowReader;

/*
 * The most entries of any kind (full-page images and inits included: a hash
 * index build logs millions of small page images) one window's block set
 * may hold: maintenance_work_mem, with the hash table's slack.
 */
uint64
gr_window_max_entries(void)
{
	return Max((uint64) maintenance_work_mem * 1024 / (2 * sizeof(GrFoldEntry)), 1024);
}

/* Give the window's memory back (after FLUSH); the next decode starts anew. */
void
gr_window_release(GrWindow *window)
{
	MemoryContextReset(window->cxt);
	memset(&window->fold, 0, sizeof(window->fold));
	window->reads = NULL;
	window->nreads = 0;
	window->bounds = NULL;
	window->nbounds = 0;
}

/* The most blocks needing a read one window may hold. */
uint64
gr_window_max_reads(void)
{
	return Max(NBuffers / GR_WINDOW_BUFFER_SHARE, 16);
}

void
gr_window_init(GrWindow *window, MemoryContext parent)
{
	memset(window, 0, sizeof(*window));
	window->cxt = AllocSetContextCreate(parent, "greenreplica window",
										ALLOCSET_DEFAULT_SIZES);
}

static void *
gr_window_alloc(void *arg, size_t size)
{
	return MemoryContextAllocHuge((MemoryContext) arg, size);
}

static void
gr_window_free(void *arg, void *ptr)
{
	pfree(ptr);
}

static bool
gr_segment_exists(XLogSegNo segno, TimeLineID tli)
{
	char		path[MAXPGPATH];
	struct stat st;

	XLogFilePath(path, tli, segno, wal_segment_size);
	return stat(path, &st) == 0;
}

/*
 * page_read callback: whole pages of received WAL, never past the
 * walreceiver's flush position.  Returns -1 when the page is not there
 * (yet); the decode then ends where it is.
 */
static int
gr_window_page_read(XLogReaderState *state, XLogRecPtr targetPagePtr, int reqLen,
					XLogRecPtr targetRecPtr, char *readBuf)
{
	GrWindowReader *priv = (GrWindowReader *) state->private_data;
	TimeLineID	tli;
	XLogRecPtr	flushed = GetWalRcvFlushRecPtr(NULL, &tli);
	XLogSegNo	segno;
	WALReadError errinfo;
	int			count;

	if (tli != 0)
		priv->receive_tli = tli;

	if (targetPagePtr + XLOG_BLCKSZ <= flushed)
		count = XLOG_BLCKSZ;
	else if (targetPagePtr + reqLen > flushed)
		return -1;
	else
		count = flushed - targetPagePtr;

	/*
	 * wal_segment_open() fails hard on a missing file: look first.  After a
	 * timeline switch the window's older part is on the replay timeline.
	 */
	XLByteToSeg(targetPagePtr, segno, wal_segment_size);
	if (gr_segment_exists(segno, priv->receive_tli))
		tli = priv->receive_tli;
	else if (gr_segment_exists(segno, priv->replay_tli))
		tli = priv->replay_tli;
	else
		return -1;

	if (!WALRead(state, readBuf, targetPagePtr, count, tli, &errinfo))
		return -1;
	return count;
}

/* The timelines the page_read callback looks for segments on. */
static void
gr_window_reader_timelines(GrWindowReader *priv)
{
	(void) GetXLogReplayRecPtr(&priv->replay_tli);
	(void) GetWalRcvFlushRecPtr(NULL, &priv->receive_tli);
	if (priv->receive_tli == 0)
		priv->receive_tli = priv->replay_tli;
}

/* An xlogreader of received WAL, in the current memory context. */
static XLogReaderState *
gr_window_reader_allocate(GrWindowReader *priv)
{
	XLogReaderState *reader;

	gr_window_reader_timelines(priv);
	reader = XLogReaderAllocate(wal_segment_size, NULL,
								XL_ROUTINE(.page_read = gr_window_page_read,
										   .segment_open = wal_segment_open,
										   .segment_close = wal_segment_close),
								priv);
	if (reader == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed while allocating a WAL reading processor.")));
	return reader;
}

/*
 * The block a record's reference block_id names, as a block-set key, and
 * whether that reference needs no read (an applied full-page image or a
 * page init).  False for a reference without a block.
 */
static bool
gr_window_block_ref(XLogReaderState *reader, int block_id, GrBlockKey *key,
					bool *no_read)
{
	RelFileNode rnode;
	ForkNumber	fork;
	BlockNumber blkno;
	DecodedBkpBlock *blk;

	if (!XLogRecGetBlockTagExtended(reader, block_id, &rnode, &fork, &blkno, NULL))
		return false;
	blk = XLogRecGetBlock(reader, block_id);
	key->spc = rnode.spcNode;
	key->db = rnode.dbNode;
	key->rel = rnode.relNode;
	key->fork = fork;
	key->block = blkno;
	*no_read = blk->apply_image || (blk->flags & BKPBLOCK_WILL_INIT);
	return true;
}

/*
 * The window's blocks that need a read, in physical order (computed once
 * per window, in its memory context).
 */
uint64
gr_window_sorted_reads(GrWindow *window, const GrBlockKey **reads)
{
	if (window->reads == NULL)
	{
		window->reads = MemoryContextAllocHuge(window->cxt,
											   sizeof(GrBlockKey) *
											   Max(window->fold.reads_needed, 1));
		window->nreads = gr_fold_collect_reads(&window->fold, window->reads);
	}
	*reads = window->reads;
	return window->nreads;
}

/*
 * Decode the window [start, end) into window->fold.  Records that start
 * before end belong to the window (the redo wrapper stops after the record
 * that reaches end).  max_reads bounds the blocks needing a read; abort_check
 * is polled now and then.  Never fails the batch: when the WAL cannot be
 * read the window is marked incomplete and holds what was decoded.
 */
void
gr_window_decode(GrWindow *window, XLogRecPtr start, XLogRecPtr end,
				 uint64 max_reads, GrAbortCheck abort_check)
{
	MemoryContext oldcontext;
	GrWindowReader priv;
	XLogReaderState *reader;
	XLogRecPtr	last_end = start;
	instr_time	started;
	instr_time	took;

	MemoryContextReset(window->cxt);
	window->reads = NULL;
	window->nreads = 0;
	window->start = start;
	window->end = end;
	window->apply_to = end;
	window->split = false;
	window->aborted = false;
	window->incomplete = false;
	window->ends_before_partial_record = false;
	window->message[0] = '\0';
	window->records = 0;
	window->last_checkpoint_end = InvalidXLogRecPtr;
	window->decoded_bytes = 0;
	window->decode_seconds = 0;

	INSTR_TIME_SET_CURRENT(started);
	oldcontext = MemoryContextSwitchTo(window->cxt);

	if (!gr_fold_init(&window->fold, GR_WINDOW_INITIAL_BLOCKS,
					  gr_window_alloc, gr_window_free, window->cxt))
		elog(ERROR, "could not allocate the window's block set");

	if (end <= start)
	{
		MemoryContextSwitchTo(oldcontext);
		return;
	}

	reader = gr_window_reader_allocate(&priv);
	XLogBeginRead(reader, start);
	for (;;)
	{
		XLogRecord *record;
		char	   *errormsg = NULL;
		uint64		new_reads = 0;
		int			block_id;

		if (window->records % GR_WINDOW_CHECK_EVERY == 0 && abort_check())
		{
			window->aborted = true;
			break;
		}

		record = XLogReadRecord(reader, &errormsg);
		if (record == NULL)
		{
			/* The record after the window end is often not all there yet. */
			if (last_end >= end)
				break;

			/*
			 * The end fell inside a record still streaming in: the window
			 * is the whole records before it, as after a split, and that
			 * record starts the next batch.  Applying it now, undecoded,
			 * would read blocks nobody prefetched and make every window
			 * taken while WAL streams look unknown to the wake decision.
			 */
			if (errormsg == NULL && window->records > 0)
			{
				window->apply_to = last_end;
				window->ends_before_partial_record = true;
				break;
			}
			window->incomplete = true;
			snprintf(window->message, sizeof(window->message),
					 "WAL not decodable at %X/%X: %s",
					 LSN_FORMAT_ARGS(reader->EndRecPtr),
					 errormsg ? errormsg : "not received yet");
			break;
		}
		/* The window ends at or before "end", at a record boundary. */
		if (reader->ReadRecPtr >= end || (reader->EndRecPtr > end && window->records > 0))
			break;

		/* Would this record take the window over its memory bound? */
		for (block_id = 0; block_id <= XLogRecMaxBlockId(reader); block_id++)
		{
			GrBlockKey	key;
			bool		no_read;

			if (gr_window_block_ref(reader, block_id, &key, &no_read) &&
				gr_fold_would_read(&window->fold, &key, no_read))
				new_reads++;
		}
		if (window->records > 0 &&
			((new_reads > 0 && window->fold.reads_needed + new_reads > max_reads) ||
			 window->fold.distinct + XLR_MAX_BLOCK_ID + 1 > gr_window_max_entries()))
		{
			window->split = true;
			window->apply_to = last_end;
			break;
		}

		for (block_id = 0; block_id <= XLogRecMaxBlockId(reader); block_id++)
		{
			GrBlockKey	key;
			bool		no_read;

			if (gr_window_block_ref(reader, block_id, &key, &no_read) &&
				!gr_fold_add(&window->fold, &key, reader->ReadRecPtr, no_read))
				elog(ERROR, "could not grow the window's block set");
		}
		window->records++;
		last_end = reader->EndRecPtr;
		if (XLogRecGetRmid(reader) == RM_XLOG_ID)
		{
			uint8		info = XLogRecGetInfo(reader) & ~XLR_INFO_MASK;

			if (info == XLOG_CHECKPOINT_ONLINE || info == XLOG_CHECKPOINT_SHUTDOWN)
				window->last_checkpoint_end = last_end;
		}
	}
	window->decoded_bytes = last_end - start;
	if (!window->split && !window->aborted && !window->incomplete && last_end > start)
		window->apply_to = last_end;
	XLogReaderFree(reader);

	MemoryContextSwitchTo(oldcontext);
	INSTR_TIME_SET_CURRENT(took);
	INSTR_TIME_SUBTRACT(took, started);
	window->decode_seconds = INSTR_TIME_GET_DOUBLE(took);
}

/*
 * The backlog's cost, counted incrementally during SLEEP: the records the
 * walreceiver has flushed past the replay position are decoded a tick's
 * share at a time with the window's page_read (pg_wal only, never past the
 * flush position), and each distinct block counts as a read when its first
 * reference in the backlog neither restores a full-page image nor
 * initializes the page, and it is not in shared buffers when first seen.
 */

/*
 * Whether the block is in shared buffers now: the buffer mapping lookup
 * PrefetchSharedBuffer() makes, under the partition lock, with no pin and no
 * I/O.  The answer may be stale at once (the buffer evicted, or one whose
 * read failed): callers use it to estimate or to skip warming a cache,
 * never for what redo reads.
 */
bool
gr_block_in_shared_buffers(const GrBlockKey *key)
{
	BufferTag	tag;
	RelFileNode rnode;
	uint32		hash;
	LWLock	   *partition;
	int			buf_id;

	rnode.spcNode = key->spc;
	rnode.dbNode = key->db;
	rnode.relNode = key->rel;
	INIT_BUFFERTAG(tag, rnode, (ForkNumber) key->fork, key->block);
	hash = BufTableHashCode(&tag);
	partition = BufMappingPartitionLock(hash);
	LWLockAcquire(partition, LW_SHARED);
	buf_id = BufTableLookup(&tag, hash);
	LWLockRelease(partition);
	return buf_id >= 0;
}

void
gr_backlog_init(GrBacklog *backlog, MemoryContext parent)
{
	memset(backlog, 0, sizeof(*backlog));
	backlog->cxt = AllocSetContextCreate(parent, "greenreplica backlog",
										 ALLOCSET_DEFAULT_SIZES);
}

/* Forget the count; the next advance starts from the replay position. */
void
gr_backlog_reset(GrBacklog *backlog)
{
	if (backlog->reader != NULL)
		XLogReaderFree(backlog->reader);
	backlog->reader = NULL;
	MemoryContextReset(backlog->cxt);
	memset(&backlog->fold, 0, sizeof(backlog->fold));
	backlog->valid = false;
	backlog->start = InvalidXLogRecPtr;
	backlog->decoded_to = InvalidXLogRecPtr;
	backlog->records = 0;
	backlog->reads = 0;
	backlog->cached = 0;
	backlog->overflow_reads = 0;
}

/*
 * Count the records received past the replay position that start before
 * "upto" (InvalidXLogRecPtr: all received), at most max_records of them in
 * this call.  A replay position other than the one counted from restarts the
 * count.
 */
void
gr_backlog_advance(GrBacklog *backlog, uint64 max_records, XLogRecPtr upto)
{
	XLogRecPtr	replayed = GetXLogReplayRecPtr(NULL);
	XLogRecPtr	flushed = GetWalRcvFlushRecPtr(NULL, NULL);
	MemoryContext oldcontext;
	uint64		done = 0;

	if (backlog->valid && backlog->start != replayed)
		gr_backlog_reset(backlog);
	if (!backlog->valid)
	{
		oldcontext = MemoryContextSwitchTo(backlog->cxt);
		if (!gr_fold_init(&backlog->fold, GR_WINDOW_INITIAL_BLOCKS,
						  gr_window_alloc, gr_window_free, backlog->cxt))
			elog(ERROR, "could not allocate the backlog's block set");
		backlog->priv = palloc0(sizeof(GrWindowReader));
		MemoryContextSwitchTo(oldcontext);
		backlog->start = replayed;
		backlog->decoded_to = replayed;
		backlog->valid = true;
	}
	if (!XLogRecPtrIsInvalid(upto) && upto < flushed)
		flushed = upto;
	if (flushed <= backlog->decoded_to)
		return;

	oldcontext = MemoryContextSwitchTo(backlog->cxt);
	if (backlog->reader == NULL)
		backlog->reader = gr_window_reader_allocate((GrWindowReader *) backlog->priv);
	else
		gr_window_reader_timelines((GrWindowReader *) backlog->priv);

	/* Always from the end of the last record counted: a clean boundary. */
	XLogBeginRead(backlog->reader, backlog->decoded_to);
	while (done < max_records)
	{
		XLogReaderState *reader = backlog->reader;
		XLogRecord *record;
		char	   *errormsg = NULL;

		record = XLogReadRecord(reader, &errormsg);
		if (record == NULL)
			break;				/* not all there yet: the next tick goes on */
		if (reader->ReadRecPtr >= flushed)
			break;
		for (int block_id = 0; block_id <= XLogRecMaxBlockId(reader); block_id++)
		{
			GrBlockKey	key;
			bool		no_read;

			if (!gr_window_block_ref(reader, block_id, &key, &no_read))
				continue;
			if (gr_fold_lookup(&backlog->fold, &key) != NULL)
			{
				(void) gr_fold_add(&backlog->fold, &key, reader->ReadRecPtr, no_read);
				continue;
			}
			if (!no_read && gr_block_in_shared_buffers(&key))
			{
				no_read = true;
				backlog->cached++;
			}
			if (backlog->fold.distinct + 1 > gr_window_max_entries() ||
				!gr_fold_add(&backlog->fold, &key, reader->ReadRecPtr, no_read))
			{
				/* block set full: count every such reference as a read */
				if (!no_read)
					backlog->overflow_reads++;
			}
		}
		backlog->records++;
		backlog->decoded_to = reader->EndRecPtr;
		done++;
	}
	backlog->reads = backlog->fold.reads_needed + backlog->overflow_reads;
	MemoryContextSwitchTo(oldcontext);
}
