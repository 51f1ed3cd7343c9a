/*-------------------------------------------------------------------------
 *
 * greenreplica.h
 *	  Shared declarations of the greenreplica extension.
 *
 * The extension is split by concern: GUCs (gr_guc.c), shared state
 * (gr_shmem.c), the scheduler background worker (gr_worker.c) and the SQL
 * API (gr_status.c).  This header holds what they share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GREENREPLICA_H
#define GREENREPLICA_H

#include "storage/spin.h"

/* greenreplica.mode */
typedef enum GrMode
{
	GR_MODE_OFF,				/* plain PostgreSQL replay */
	GR_MODE_DEFER,				/* batched replay on an RTO-derived schedule */
	GR_MODE_COMPACT				/* batched replay plus fold/sort/prefetch */
} GrMode;

/*
 * Where the scheduler is in its cycle.  Keep gr_phase_names[] in gr_shmem.c
 * in step with this list.
 */
typedef enum GrPhase
{
	GR_PHASE_INACTIVE,			/* no scheduler running (primary, or not yet
								 * started) */
	GR_PHASE_IDLE,				/* scheduler running, not batching */
	GR_PHASE_COUNT
} GrPhase;

/* State shared between the scheduler, backends and the startup process. */
typedef struct GrSharedState
{
	slock_t		mutex;			/* protects everything below */
	GrPhase		phase;
	int			worker_pid;		/* 0 when no scheduler runs */
} GrSharedState;

/* GUC variables (gr_guc.c) */
extern int	gr_mode;
extern int	gr_rto_s;
extern int	gr_window_size_mb;
extern char *gr_agent_socket;
extern int	gr_max_spin_cycles_per_day;

extern void gr_define_gucs(void);
extern const char *gr_mode_name(int mode);

/* Shared memory (gr_shmem.c) */
extern GrSharedState *gr_state;

extern void gr_shmem_install_hooks(void);
extern const char *gr_phase_name(GrPhase phase);
extern void gr_set_phase(GrPhase phase);

/* Scheduler (gr_worker.c) */
extern void gr_register_worker(void);

#endif							/* GREENREPLICA_H */
