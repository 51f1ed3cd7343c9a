/*-------------------------------------------------------------------------
 *
 * gr_worker.c
 *	  The greenreplica scheduler: a background worker on the standby.
 *
 * The worker starts once the standby has reached a consistent state (so it
 * needs hot_standby, as pausing replay does) and lives exactly as long as
 * recovery: on a primary, or after promotion, it exits and is not started
 * again until the next server start.  It never holds anything that
 * shutdown or promotion would have to wait for.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#include "greenreplica.h"

/* How often the idle scheduler looks at the recovery state. */
#define GR_WORKER_NAP_MS		1000L

/* Seconds before the postmaster restarts a scheduler that failed. */
#define GR_WORKER_RESTART_S		5

PGDLLEXPORT void gr_scheduler_main(Datum main_arg);

void
gr_register_worker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = GR_WORKER_RESTART_S;
	strlcpy(worker.bgw_library_name, "greenreplica", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "gr_scheduler_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "greenreplica scheduler", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "greenreplica scheduler", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* Leave the shared state as if no scheduler had run. */
static void
gr_worker_detach(int code, Datum arg)
{
	SpinLockAcquire(&gr_state->mutex);
	gr_state->phase = GR_PHASE_INACTIVE;
	gr_state->worker_pid = 0;
	SpinLockRelease(&gr_state->mutex);
}

void
gr_scheduler_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	/*
	 * Exit code 0 unregisters the worker: there is nothing to schedule on a
	 * primary, and a promoted standby stays a primary until it restarts.
	 */
	if (!RecoveryInProgress())
	{
		ereport(DEBUG1,
				(errmsg("greenreplica scheduler not started: server is not in recovery")));
		proc_exit(0);
	}

	before_shmem_exit(gr_worker_detach, (Datum) 0);

	SpinLockAcquire(&gr_state->mutex);
	gr_state->worker_pid = MyProcPid;
	gr_state->phase = GR_PHASE_IDLE;
	SpinLockRelease(&gr_state->mutex);

	ereport(LOG,
			(errmsg("greenreplica scheduler started in mode \"%s\"",
					gr_mode_name(gr_mode))));

	for (;;)
	{
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 GR_WORKER_NAP_MS,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		/* Exit code 1: the postmaster restarts us unless it is shutting down. */
		if (ShutdownRequestPending)
			proc_exit(1);

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		if (!RecoveryInProgress())
		{
			ereport(LOG,
					(errmsg("greenreplica scheduler exiting: recovery has ended")));
			proc_exit(0);
		}
	}
}
