/*-------------------------------------------------------------------------
 *
 * gr_shmem.c
 *	  greenreplica's shared state.
 *
 * One small struct, guarded by a spinlock: it is read by backends for the
 * status view and written by the scheduler, never held across I/O.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "greenreplica.h"

GrSharedState *gr_state = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static const char *const gr_phase_names[GR_PHASE_COUNT] = {
	[GR_PHASE_INACTIVE] = "inactive",
	[GR_PHASE_IDLE] = "idle",
};

const char *
gr_phase_name(GrPhase phase)
{
	if (phase < 0 || phase >= GR_PHASE_COUNT)
		return "unknown";
	return gr_phase_names[phase];
}

void
gr_set_phase(GrPhase phase)
{
	SpinLockAcquire(&gr_state->mutex);
	gr_state->phase = phase;
	SpinLockRelease(&gr_state->mutex);
}

static void
gr_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(MAXALIGN(sizeof(GrSharedState)));
}

static void
gr_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	gr_state = ShmemInitStruct("greenreplica", sizeof(GrSharedState), &found);
	if (!found)
	{
		memset(gr_state, 0, sizeof(GrSharedState));
		SpinLockInit(&gr_state->mutex);
		gr_state->phase = GR_PHASE_INACTIVE;
	}
	LWLockRelease(AddinShmemInitLock);
}

void
gr_shmem_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = gr_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = gr_shmem_startup;
}
