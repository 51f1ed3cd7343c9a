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
#include "utils/timestamp.h"

#include "greenreplica.h"

GrSharedState *gr_state = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static const char *const gr_phase_names[GR_PHASE_COUNT] = {
	[GR_PHASE_INACTIVE] = "inactive",
	[GR_PHASE_OFF] = "off",
	[GR_PHASE_SLEEP] = "sleep",
	[GR_PHASE_WAKE] = "wake",
	[GR_PHASE_PREFETCH] = "prefetch",
	[GR_PHASE_APPLY] = "apply",
	[GR_PHASE_FLUSH] = "flush",
	[GR_PHASE_CONTINUOUS] = "continuous",
	[GR_PHASE_PROMOTING] = "promoting",
};

const char *
gr_agent_state_name(GrAgentState state)
{
	switch (state)
	{
		case GR_AGENT_ABSENT:
			return "absent";
		case GR_AGENT_CONNECTED:
			return "connected";
		case GR_AGENT_ERROR:
			return "error";
	}
	return "unknown";
}

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

void
gr_set_note(const char *fmt,...)
{
	char		buf[GR_MESSAGE_LEN];
	va_list		args;

	va_start(args, fmt);
	vsnprintf(buf, sizeof(buf), fmt, args);
	va_end(args);

	SpinLockAcquire(&gr_state->mutex);
	strlcpy(gr_state->note, buf, sizeof(gr_state->note));
	SpinLockRelease(&gr_state->mutex);
}

/* What a long phase is doing now ("" or NULL: nothing in particular). */
void
gr_set_step(const char *step)
{
	SpinLockAcquire(&gr_state->mutex);
	strlcpy(gr_state->step, step ? step : "", sizeof(gr_state->step));
	gr_state->step_started_at = step ? GetCurrentTimestamp() : 0;
	gr_state->step_done = -1;
	gr_state->step_total = -1;
	SpinLockRelease(&gr_state->mutex);
}

/* How far the step under way is: done of total, in the step's own unit. */
void
gr_set_step_progress(double done, double total)
{
	SpinLockAcquire(&gr_state->mutex);
	gr_state->step_done = done;
	gr_state->step_total = total;
	SpinLockRelease(&gr_state->mutex);
}

/* How far the step under way is, its total left as set. */
void
gr_set_step_done(double done)
{
	SpinLockAcquire(&gr_state->mutex);
	gr_state->step_done = done;
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
		pg_atomic_init_u64(&gr_state->stop_lsn, 0);
		pg_atomic_init_u64(&gr_state->records_replayed, 0);
		pg_atomic_init_u64(&gr_state->last_checkpoint_redo, 0);
		gr_state->phase = GR_PHASE_INACTIVE;
		gr_state->r_gen = -1;
		gr_state->r_apl = -1;
		gr_state->agent_state = GR_AGENT_ABSENT;
		strlcpy(gr_state->volume_state, "unknown", GR_STATE_LEN);
		gr_state->last_promotion_s = -1;
		gr_state->step_done = -1;
		gr_state->step_total = -1;
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
