/*-------------------------------------------------------------------------
 *
 * gr_redo.c
 *	  A thin wrapper around the built-in resource managers' redo routines.
 *
 * It lets the scheduler stop replay within one record of a planned window
 * end: after the record whose end reaches gr_state->stop_lsn is applied,
 * the wrapper requests a recovery pause, which the startup process honours
 * before it applies the next record.  Redo itself stays PostgreSQL's own,
 * in LSN order.  The wrapper also counts records and remembers the redo
 * pointer of the last replayed checkpoint record, where a restartpoint can
 * be taken.
 *
 * RmgrTable is writable in PostgreSQL 15 (custom resource managers); the
 * wrapper is installed in the postmaster from _PG_init and inherited by
 * the startup process.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"

#include "greenreplica.h"

static void (*gr_original_redo[RM_MAX_BUILTIN_ID + 1]) (XLogReaderState *record);

static void
gr_redo(XLogReaderState *record)
{
	RmgrId		rmid = XLogRecGetRmid(record);
	XLogRecPtr	stop_lsn;

	gr_original_redo[rmid] (record);

	/* The startup process is the only writer of these two. */
	pg_atomic_write_u64(&gr_state->records_replayed,
						pg_atomic_read_u64(&gr_state->records_replayed) + 1);
	if (rmid == RM_XLOG_ID)
	{
		uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;

		if (info == XLOG_CHECKPOINT_ONLINE || info == XLOG_CHECKPOINT_SHUTDOWN)
		{
			CheckPoint	checkpoint;

			memcpy(&checkpoint, XLogRecGetData(record), sizeof(CheckPoint));
			pg_atomic_write_u64(&gr_state->last_checkpoint_redo, checkpoint.redo);
		}
	}

	stop_lsn = pg_atomic_read_u64(&gr_state->stop_lsn);
	if (stop_lsn != InvalidXLogRecPtr && record->EndRecPtr >= stop_lsn)
	{
		pg_atomic_write_u64(&gr_state->stop_lsn, InvalidXLogRecPtr);

		/* After a promote request everything is replayed, at once. */
		if (!PromoteIsTriggered())
		{
			Latch	   *latch;

			SetRecoveryPause(true);

			/* The scheduler need not wait for its next tick to go on. */
			SpinLockAcquire(&gr_state->mutex);
			latch = gr_state->worker_latch;
			SpinLockRelease(&gr_state->mutex);
			if (latch)
				SetLatch(latch);
		}
	}
}

void
gr_install_redo_wrapper(void)
{
	int			rmid;

	for (rmid = 0; rmid <= RM_MAX_BUILTIN_ID; rmid++)
	{
		if (RmgrTable[rmid].rm_redo == NULL || RmgrTable[rmid].rm_redo == gr_redo)
			continue;
		gr_original_redo[rmid] = RmgrTable[rmid].rm_redo;
		RmgrTable[rmid].rm_redo = gr_redo;
	}
}
