/*-------------------------------------------------------------------------
 *
 * greenreplica.h
 *	  Shared declarations of the greenreplica extension.
 *
 * The extension is split by concern: GUCs (gr_guc.c), shared state
 * (gr_shmem.c), the redo wrapper that stops replay at a window end
 * (gr_redo.c), the scheduler background worker (gr_worker.c), the batch
 * flush (gr_flush.c), the storage-agent client (gr_agent.c), the pure
 * planner (gr_plan.c), eager compaction (gr_fold.c, pure; gr_window.c and
 * gr_prefetch.c) and the SQL API (gr_status.c).  This header holds what
 * they share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GREENREPLICA_H
#define GREENREPLICA_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"

/* greenreplica.mode */
typedef enum GrMode
{
	GR_MODE_OFF,				/* plain PostgreSQL replay */
	GR_MODE_DEFER,				/* batched replay on an RTO-derived schedule */
	GR_MODE_COMPACT				/* batched replay plus fold/sort/prefetch */
} GrMode;

/* greenreplica.prefetch_method */
typedef enum GrPrefetchMethod
{
	GR_PREFETCH_BUFFERS,		/* read into shared buffers, run by run */
	GR_PREFETCH_OS_CACHE		/* whole read set into the OS page cache */
} GrPrefetchMethod;

/*
 * Where the scheduler is in its cycle.  Keep gr_phase_names[] in gr_shmem.c
 * in step with this list.
 */
typedef enum GrPhase
{
	GR_PHASE_INACTIVE,			/* no scheduler (primary, or not started) */
	GR_PHASE_OFF,				/* mode = off: plain replay */
	GR_PHASE_SLEEP,				/* replay paused, WAL accumulates */
	GR_PHASE_WAKE,				/* waiting for the data volume to spin up */
	GR_PHASE_PREFETCH,			/* compact: reading the window's blocks */
	GR_PHASE_APPLY,				/* replaying the window */
	GR_PHASE_FLUSH,				/* writing back and syncing the window */
	GR_PHASE_CONTINUOUS,		/* no feasible plan: plain replay */
	GR_PHASE_PROMOTING,			/* promotion requested: replaying all */
	GR_PHASE_COUNT
} GrPhase;

/* What the scheduler knows of the storage agent. */
typedef enum GrAgentState
{
	GR_AGENT_ABSENT,			/* no greenreplica.agent_socket */
	GR_AGENT_CONNECTED,
	GR_AGENT_ERROR
} GrAgentState;

#define GR_MESSAGE_LEN	256
#define GR_STATE_LEN	32

/* State shared between the scheduler, backends and the startup process. */
typedef struct GrSharedState
{
	/*
	 * Written by the startup process in the redo wrapper, read by the
	 * scheduler: lock-free, each has a single writer.
	 */
	pg_atomic_uint64 stop_lsn;	/* pause after the record ending here; 0 =
								 * none */
	pg_atomic_uint64 records_replayed;
	pg_atomic_uint64 last_checkpoint_redo;	/* redo pointer of the last
											 * replayed checkpoint record */

	slock_t		mutex;			/* protects everything below */
	GrPhase		phase;
	int			worker_pid;
	Latch	   *worker_latch;	/* set to wake the scheduler */
	bool		batch_requested;	/* greenreplica_batch_now() */

	/* the operator's pg_wal_replay_pause() / _resume() (gr_pause.c) */
	bool		operator_paused;
	TimestampTz operator_paused_at;
	uint64		operator_resumes;	/* successful pg_wal_replay_resume() calls */

	/* rates and plan */
	double		r_gen;			/* bytes/s, smoothed; < 0 unknown */
	double		r_apl;			/* bytes/s used for planning */
	bool		r_apl_measured; /* false while r_apl is the default */
	uint64		unapplied_bytes;
	double		rto_budget_s;	/* rto - margin - spin-up */
	double		rto_estimate_s; /* if promoted now */
	uint64		max_unapplied_bytes;
	bool		feasible;
	TimestampTz next_batch_at;	/* 0 = not planned */
	char		note[GR_MESSAGE_LEN];	/* why the scheduler does what it does */

	/* the last batch */
	uint64		batches;
	TimestampTz last_batch_start;
	double		last_batch_duration_s;
	uint64		last_batch_bytes;
	uint64		last_batch_records;
	uint64		last_batch_buffers_flushed;

	/* the last batch's compaction (mode = compact), summed over its windows */
	bool		last_batch_compacted;
	uint64		last_batch_windows; /* > 1 when split for memory */
	uint64		last_batch_decoded_records;
	uint64		last_batch_block_refs;
	uint64		last_batch_distinct_blocks;
	uint64		last_batch_reads_needed;
	uint64		last_batch_reads_avoided;
	double		last_batch_fold_ratio;
	uint64		last_batch_prefetch_ios;
	uint64		last_batch_prefetch_bytes;
	double		last_batch_sequential_share;
	double		last_batch_decode_seconds;
	double		last_batch_bytes_per_block; /* block set memory per block */
	uint64		last_batch_hint_extents;	/* volume extents hinted to the
											 * agent */
	/* where the last batch's time went, and os_cache gap reads */
	double		last_batch_wake_s;	/* spin-up, overlapping the decode */
	double		last_batch_prefetch_s;
	double		last_batch_apply_s;
	double		last_batch_flush_s;
	uint64		last_batch_gap_blocks;
	uint64		last_batch_blocks_cached;	/* read set found in shared
											 * buffers, not read */

	/* compaction totals since the scheduler started */
	uint64		total_block_refs;
	uint64		total_distinct_blocks;
	uint64		total_reads_avoided;
	uint64		total_prefetch_ios;
	uint64		total_prefetch_bytes;
	uint64		window_splits;
	uint64		prefetches_aborted;

	/* the data volume */
	int			spin_cycles_today;
	GrAgentState agent_state;
	char		agent_message[GR_MESSAGE_LEN];
	char		volume_state[GR_STATE_LEN];
	double		spin_up_s;
	double		break_even_s;

	/* the last promotion */
	double		last_promotion_s;	/* < 0 none yet */

	/* progress and freshness */
	char		step[GR_STATE_LEN]; /* what a long phase is doing; "" none */
	TimestampTz step_started_at;
	TimestampTz volume_state_at;	/* when the agent last reported it */
	double		oldest_unapplied_age_s;
	char		wal_receiver[GR_STATE_LEN]; /* the walreceiver's state */

	/* what touched the data volume since it was put to sleep; < 0 unknown */
	double		sleep_volume_ios;
	double		sleep_volume_spin_ups;

	/* the time model of the backlog (gr_plan.h) */
	double		unapplied_reads;	/* block reads of the unapplied WAL */
	double		read_time_s;	/* per read, as a promotion reads */
	bool		read_time_measured;
	double		replay_rate;	/* WAL bytes/s of replay's CPU work */

	/* progress of the step under way, in its own unit; < 0 unknown */
	double		step_done;
	double		step_total;

	/* dirty buffers carried across batches, and restartpoints at batch ends */
	uint64		carried_dirty_buffers;
	double		carried_write_s;	/* what writing them adds to a promotion */
	char		write_back[GR_MESSAGE_LEN]; /* the last FLUSH's decision */
	bool		last_batch_ended_at_checkpoint;
	uint64		restartpoints;	/* requested at batch ends */

	/* pacing the day's start/stop budget */
	int			spin_cycle_budget;
	bool		paced;
	double		pace_interval_s;

	/* batches whose wake asked only for what their writes touch (gr_wake.h) */
	uint64		write_only_batches;
} GrSharedState;

/* Entry point (greenreplica.c) */
extern void gr_require_preload(const char *function);

/* GUC variables (gr_guc.c) */
extern int	gr_mode;
extern int	gr_rto_s;
extern int	gr_window_size_mb;
extern char *gr_agent_socket;
extern char *gr_agent_volume;
extern int	gr_max_spin_cycles_per_day;
extern int	gr_debug_prefetch_delay_ms;
extern int	gr_debug_flush_delay_ms;
extern bool gr_debug_prefetch_resident;
extern int	gr_max_apply_delay_s;
extern int	gr_prefetch_method;
extern int	gr_prefetch_merge_gap;
extern int	gr_boundary_slack_kb;
extern int	gr_initial_read_time_ms;
extern bool gr_carry_dirty_buffers;

extern void gr_define_gucs(void);
extern const char *gr_mode_name(int mode);

/* Shared memory (gr_shmem.c) */
extern GrSharedState *gr_state;

extern void gr_shmem_install_hooks(void);
extern const char *gr_phase_name(GrPhase phase);
extern const char *gr_agent_state_name(GrAgentState state);
extern void gr_set_phase(GrPhase phase);
extern void gr_set_note(const char *fmt,...) pg_attribute_printf(1, 2);
extern void gr_set_step(const char *step);
extern void gr_set_step_progress(double done, double total);
extern void gr_set_step_done(double done);

/* Operator pause and resume (gr_pause.c) */
extern void gr_install_pause_hooks(void);

/* Redo wrapper (gr_redo.c) */
extern void gr_install_redo_wrapper(void);

/* Scheduler (gr_worker.c) */
extern void gr_register_worker(void);

/* Batch flush (gr_flush.c) */
extern int	gr_write_back(void);
extern int	gr_count_dirty_buffers(void);
extern void gr_sync_data(void);

#endif							/* GREENREPLICA_H */
