/*-------------------------------------------------------------------------
 *
 * gr_worker.c
 *	  The greenreplica scheduler: a background worker on the standby.
 *
 * It runs the batch cycle SLEEP -> WAKE -> [PREFETCH] -> APPLY -> FLUSH -> SLEEP:
 *
 *	SLEEP	replay is paused; the walreceiver goes on receiving and flushing
 *			WAL, so the primary's synchronous commits are unaffected.  A batch
 *			starts when the backlog reaches what can still be applied within
 *			the RTO budget (gr_plan.c), or on greenreplica_batch_now().
 *	WAKE	the storage agent spins the data volume up.  With mode = compact
 *			the window is decoded from pg_wal meanwhile (gr_window.c): its
 *			block set, folded.
 *	PREFETCH	(compact only) the window's blocks that need a read are read
 *			into shared buffers in physical order (gr_prefetch.c).  When
 *			they would not fit, the window was split: APPLY stops at the
 *			split and the next window is decoded and prefetched right away.
 *	APPLY	replay resumes; the redo wrapper pauses it again right after the
 *			record that reaches the WAL received when the batch began.
 *	FLUSH	every dirty buffer is written in physical order (a restartpoint
 *			too, when the window held a checkpoint), the data filesystems are
 *			synced, and the agent is asked to spin the volume down when the
 *			expected idle time beats the break-even time and the day's
 *			start/stop budget allows it.
 *
 * Promotion wins at every phase: on a promote request the scheduler
 * unpauses at once, wakes the volume and lets PostgreSQL replay to the end.
 * When no plan is feasible, or the agent fails, replay runs continuously as
 * in stock PostgreSQL, and the status says why.
 *
 * The worker starts once the standby has reached a consistent state (so it
 * needs hot_standby, as pausing replay does) and lives exactly as long as
 * recovery.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogprefetcher.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/bgwriter.h"
#include "postmaster/interrupt.h"
#include "postmaster/startup.h"
#include "replication/walreceiver.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "greenreplica.h"
#include "gr_agent.h"
#include "gr_plan.h"
#include "gr_window.h"

/* How often the scheduler looks at replay, rates and promotion. */
#define GR_TICK_MS				100L

/* Seconds before the postmaster restarts a scheduler that failed. */
#define GR_WORKER_RESTART_S		5

/*
 * Apply rate shown before the first batch is measured (bytes/s).  It no
 * longer plans anything: the plan is by time (gr_plan_by_time).
 */
#define GR_DEFAULT_R_APL		(16.0 * 1024 * 1024)

/*
 * CPU replay rate of the time model before one is measured (WAL bytes/s of
 * replay with every block at hand).  The per-read time starts at
 * greenreplica.initial_read_time.
 */
#define GR_DEFAULT_REPLAY_RATE	(16.0 * 1024 * 1024)

/* A batch with fewer reads says nothing about the per-read time. */
#define GR_READ_SAMPLE_MIN_READS	32

/* A backlog this large tells the cost per byte of arriving WAL. */
#define GR_COST_MIN_BYTES		(64 * 1024)

/* Records the backlog count decodes per tick during SLEEP. */
#define GR_BACKLOG_RECORDS_PER_TICK	50000

/* Time constant of the WAL generation rate's moving average (s). */
#define GR_R_GEN_TAU_S			30.0

/* Weight of the newest batch in the apply rate's moving average. */
#define GR_R_APL_WEIGHT			0.5

/* Batches smaller than this do not update the apply rate: too noisy. */
#define GR_R_APL_MIN_BYTES		(256 * 1024)

/* Safety margin kept out of the RTO: max(this many s, fraction of RTO). */
#define GR_RTO_MARGIN_MIN_S		2.0
#define GR_RTO_MARGIN_FRACTION	0.10

/*
 * How often the agent's view of the volume is refreshed (s): often enough
 * that the status shows a volume woken behind the scheduler's back.
 */
#define GR_AGENT_REFRESH_S		5

/* Start/stop budget window. */
#define GR_DAY_S				86400

/*
 * Carrying dirty buffers: the most of shared_buffers the carried buffers and
 * the next batch's may take (APPLY must not evict dirty buffers one at a
 * time), and the most of the RTO budget writing the carried ones may take.
 */
#define GR_CARRY_MAX_DIRTY_SHARE	0.5
#define GR_CARRY_MAX_BUDGET_SHARE	0.25

/* A write-back of fewer buffers says nothing about the time per buffer. */
#define GR_WRITE_SAMPLE_MIN_BUFFERS	32

/*
 * A window ends at its last checkpoint record when that keeps at least this
 * share of its bytes (with carrying on, mode compact).
 */
#define GR_CHECKPOINT_END_MIN_SHARE	0.5

/* File whose presence means a promotion was requested (pg_ctl promote). */
#define GR_PROMOTE_SIGNAL_FILE	"promote"

PGDLLEXPORT void gr_scheduler_main(Datum main_arg);

/* Compaction figures of the current batch, summed over its windows. */
typedef struct GrBatchCompaction
{
	uint64		windows;
	uint64		records;
	uint64		block_refs;
	uint64		distinct_blocks;
	uint64		reads_needed;
	uint64		reads_avoided;
	uint64		ios;
	uint64		bytes;
	uint64		blocks_read;
	uint64		splits;
	uint64		index_bytes;
	uint64		hint_extents;	/* volume extents the agent recorded */
	double		decode_seconds;
	double		prefetch_seconds;	/* PREFETCH's share of the batch */
	uint64		gap_blocks;		/* os_cache: read through between needed */
	uint64		blocks_cached;	/* read set found in shared buffers */
} GrBatchCompaction;

/* The scheduler's private state; what others may see goes to gr_state. */
typedef struct GrScheduler
{
	GrPhase		phase;

	/* rates */
	TimestampTz last_sample_at;
	XLogRecPtr	last_received;
	double		r_gen;			/* < 0 until two samples */
	double		r_apl;
	bool		r_apl_measured;

	/* the agent and the volume */
	GrAgentState agent_state;
	char		agent_message[GR_MESSAGE_LEN];
	TimestampTz agent_checked_at;
	TimestampTz volume_state_at;	/* when sched.volume.state was reported */
	GrVolumeInfo volume;
	bool		volume_asleep;	/* we asked it to sleep and it agreed */
	TimestampTz asleep_at;		/* when it agreed */
	double		asleep_ios;		/* the agent's ledger when it agreed */
	double		asleep_spin_ups;
	TimestampTz volume_ready_at;	/* during WAKE */
	TimestampTz spin_cycles[1441];	/* ring of sleep times, last 24 h */
	int			spin_cycle_next;
	double		cycle_spin_ups; /* the agent's spin-ups at the last sleep
								 * that spent a cycle; -1 none yet */

	/* the current batch */
	TimestampTz batch_start;
	XLogRecPtr	batch_end;		/* WAL received when the batch began, at
								 * most window_size past the replay position */
	bool		batch_capped;	/* window_size cut the batch short */
	bool		work_started;	/* apply_start and apply_from are set */
	TimestampTz apply_start;
	XLogRecPtr	apply_from;
	XLogRecPtr	apply_to;		/* where this window's APPLY stops */

	/* compaction (mode = compact) */
	bool		compacting;		/* this batch is compacted */
	GrWindow	window;
	GrBatchCompaction compaction;
	uint64		records_at_apply;
	XLogRecPtr	restartpoint_requested; /* redo of the checkpoint FLUSH
										 * last requested a restartpoint for */

	/* when the received WAL arrived (greenreplica.max_apply_delay) */
	GrArrivals	arrivals;

	/* the time model (gr_plan.h) and the backlog it prices */
	GrApplyModel model;
	bool		read_measured;	/* model.read_s measured in LSN order */
	bool		replay_measured;	/* model.replay_rate measured */
	double		read_s_sorted;	/* compact PREFETCH, per block; < 0 unknown */
	double		reads_per_byte; /* of the last backlog large enough; < 0
								 * unknown */
	GrBacklog	backlog;
	double		backlog_reads;	/* estimated reads of all unapplied WAL */

	/* plan */
	GrTimePlan	plan;
	bool		infeasible_logged;

	/* the batch's own estimate, and what its work took */
	double		batch_reads;
	double		batch_estimate_s;
	uint64		batch_bytes;
	TimestampTz apply_phase_at; /* replay released for this window */
	XLogRecPtr	apply_window_from;	/* replay position then */
	double		apply_phase_s;	/* summed over the batch's windows */

	/* dirty buffers carried across batches (greenreplica.carry_dirty_buffers) */
	double		carried_dirty;	/* left dirty by the last FLUSH */
	double		carried_write_s;	/* what writing them adds to a promotion */
	double		write_s;		/* per buffer of a sorted write-back, sync
								 * included; < 0 not measured */
	XLogRecPtr	restartpoint_redo;	/* redo pointer last seen */
	TimestampTz restartpoint_at;	/* when it moved; 0 unknown */
	bool		ended_at_checkpoint;	/* this batch's window did */
	TimestampTz flush_end_at;	/* when the last batch's FLUSH ended */
	char		write_back[GR_MESSAGE_LEN];

	/* pacing the start/stop budget */
	GrPace		pace;

	/* the estimate when the promotion was requested */
	double		promote_estimate_s;

	/* promotion */
	TimestampTz promote_seen_at;
	XLogRecPtr	promote_replayed;	/* replay position at the request */

	/* pause ownership (see gr_pause.c) */
	bool		pause_owned;	/* the pause in effect is the scheduler's */
	uint64		operator_resumes_seen;
	bool		resumed_by_operator;	/* replaying freely until the next batch */
	TimestampTz resumed_at;
	XLogRecPtr	resumed_at_lsn;
	bool		standing_down;	/* a recovery target is configured */

	/* the WAL source watchdog */
	bool		source_lost;	/* replay released until streaming resumes */
	bool		source_changed; /* ... because primary_conninfo changed */
	pid_t		source_lost_pid;	/* the walreceiver when released */
	TimestampTz source_bad_since;	/* walreceiver seen not streaming */
	XLogRecPtr	source_frozen_lsn;
	TimestampTz source_frozen_since;
	char		conninfo_seen[MAXCONNINFO];
	char		slot_seen[NAMEDATALEN];
} GrScheduler;

/* What the startup process's walreceiver is doing. */
typedef struct GrWalSource
{
	WalRcvState state;
	pid_t		pid;
	TimeLineID	received_tli;
	XLogRecPtr	flushed;
	XLogRecPtr	latest_end;		/* the sender's WAL end, from its messages */
} GrWalSource;

static GrScheduler sched;

static const char *gr_walrcv_state_name(WalRcvState state);
static void gr_read_wal_source(GrWalSource *src);

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

static bool
gr_operator_paused(void)
{
	bool		paused;

	SpinLockAcquire(&gr_state->mutex);
	paused = gr_state->operator_paused;
	SpinLockRelease(&gr_state->mutex);
	return paused;
}

/* Pause replay: the pause is the scheduler's until it releases it. */
static void
gr_pause_replay(void)
{
	SetRecoveryPause(true);
	sched.pause_owned = true;
}

/*
 * Disarm the stop and release the scheduler's own pause.  A pause somebody
 * else requested (the operator, a reached recovery target) is never
 * released: releasing PostgreSQL's pause at a recovery target promotes.
 */
static void
gr_release_replay(void)
{
	pg_atomic_write_u64(&gr_state->stop_lsn, InvalidXLogRecPtr);
	if (sched.pause_owned && !gr_operator_paused() &&
		recoveryTarget == RECOVERY_TARGET_UNSET)
		SetRecoveryPause(false);
	sched.pause_owned = false;
}

/*
 * On exit, never leave the scheduler's pause or a stop armed: whatever
 * happens to the scheduler, the standby goes on replaying as stock
 * PostgreSQL would.  Anybody else's pause stays.
 */
static void
gr_worker_detach(int code, Datum arg)
{
	pg_atomic_write_u64(&gr_state->stop_lsn, InvalidXLogRecPtr);
	if (RecoveryInProgress())
		gr_release_replay();

	SpinLockAcquire(&gr_state->mutex);
	gr_state->phase = GR_PHASE_INACTIVE;
	gr_state->worker_pid = 0;
	gr_state->worker_latch = NULL;
	SpinLockRelease(&gr_state->mutex);
}

static double
gr_seconds_between(TimestampTz from, TimestampTz to)
{
	return (double) (to - from) / USECS_PER_SEC;
}

static TimestampTz
gr_after_seconds(TimestampTz from, double seconds)
{
	if (!isfinite(seconds) || seconds > 100.0 * 365 * GR_DAY_S)
		return 0;
	return from + (TimestampTz) (seconds * USECS_PER_SEC);
}

/* WAL received and flushed by the walreceiver; invalid without streaming. */
static XLogRecPtr
gr_received_lsn(void)
{
	return GetWalRcvFlushRecPtr(NULL, NULL);
}

static uint64
gr_unapplied_bytes(void)
{
	XLogRecPtr	received = gr_received_lsn();
	XLogRecPtr	replayed = GetXLogReplayRecPtr(NULL);

	return received > replayed ? received - replayed : 0;
}

static double
gr_timestamp_seconds(TimestampTz t)
{
	return (double) t / USECS_PER_SEC;
}

/* Seconds since the oldest WAL not yet applied arrived; 0 when none is. */
static double
gr_oldest_unapplied_age(TimestampTz now)
{
	double		oldest;

	gr_arrivals_note(&sched.arrivals, gr_received_lsn(), gr_timestamp_seconds(now));
	oldest = gr_arrivals_oldest(&sched.arrivals, GetXLogReplayRecPtr(NULL));
	return oldest < 0 ? 0 : Max(0, gr_timestamp_seconds(now) - oldest);
}

/* The staleness bound is reached: received WAL has waited long enough. */
static bool
gr_apply_delay_reached(TimestampTz now)
{
	return gr_max_apply_delay_s > 0 &&
		gr_oldest_unapplied_age(now) >= (double) gr_max_apply_delay_s;
}

static void
gr_enter(GrPhase phase)
{
	sched.phase = phase;
	gr_set_phase(phase);
	gr_set_step(NULL);
}

static double
gr_rto_margin_s(void)
{
	return Max(GR_RTO_MARGIN_MIN_S, GR_RTO_MARGIN_FRACTION * gr_rto_s);
}

static int
gr_spin_cycles_last_day(TimestampTz now)
{
	int			count = 0;
	int			i;

	for (i = 0; i < lengthof(sched.spin_cycles); i++)
	{
		if (sched.spin_cycles[i] != 0 &&
			gr_seconds_between(sched.spin_cycles[i], now) < GR_DAY_S)
			count++;
	}
	return count;
}

/* Record an agent failure; one log line per incident. */
static void
gr_agent_failed(const char *what, const char *err)
{
	if (sched.agent_state != GR_AGENT_ERROR)
		ereport(LOG,
				(errmsg("greenreplica storage agent failed during %s: %s", what, err),
				 errdetail("Replay continues as plain PostgreSQL replay until the agent answers again.")));
	sched.agent_state = GR_AGENT_ERROR;
	snprintf(sched.agent_message, sizeof(sched.agent_message), "%s: %s", what, err);
}

static void
gr_agent_answered(void)
{
	if (sched.agent_state == GR_AGENT_ERROR)
		ereport(LOG,
				(errmsg("greenreplica storage agent answers again; batching resumes")));
	sched.agent_state = GR_AGENT_CONNECTED;
	sched.agent_message[0] = '\0';
}

/* Refresh what the agent says about the volume, now and then. */
static void
gr_refresh_agent(TimestampTz now, bool force)
{
	char		err[GR_MESSAGE_LEN];
	int			interval = sched.agent_state == GR_AGENT_ERROR ? 5 : GR_AGENT_REFRESH_S;

	if (!gr_agent_configured())
	{
		sched.agent_state = GR_AGENT_ABSENT;
		sched.agent_message[0] = '\0';
		sched.volume.spin_up_s = 0;
		sched.volume.break_even_s = 0;
		strlcpy(sched.volume.state, "unmanaged", sizeof(sched.volume.state));
		sched.volume_asleep = false;
		return;
	}
	if (!force && sched.agent_checked_at != 0 &&
		gr_seconds_between(sched.agent_checked_at, now) < interval)
		return;

	sched.agent_checked_at = now;
	if (gr_agent_volume_info(&sched.volume, err, sizeof(err)))
	{
		gr_agent_answered();
		sched.volume_state_at = now;
	}
	else
		gr_agent_failed("volume lookup", err);
}

/*
 * Sample the WAL generation rate from the sender's WAL end, as its messages
 * report it: what the walreceiver flushes grows faster than the primary
 * writes while it catches up (after a restart, a disconnection, or a
 * standby started behind), which is no generation rate.
 */
static void
gr_sample_rates(TimestampTz now)
{
	GrWalSource src;
	XLogRecPtr	received;
	double		dt;

	gr_read_wal_source(&src);
	received = src.state == WALRCV_STREAMING ? src.latest_end : InvalidXLogRecPtr;

	/* (Re)start sampling when streaming (re)starts. */
	if (sched.last_sample_at == 0 || XLogRecPtrIsInvalid(sched.last_received) ||
		XLogRecPtrIsInvalid(received) || received < sched.last_received)
	{
		sched.last_sample_at = now;
		sched.last_received = received;
		return;
	}
	dt = gr_seconds_between(sched.last_sample_at, now);
	if (dt < 1.0)
		return;
	sched.r_gen = gr_plan_smooth(sched.r_gen,
								 (double) (received - sched.last_received) / dt,
								 dt, GR_R_GEN_TAU_S);
	sched.last_sample_at = now;
	sched.last_received = received;
}

/*
 * The per-read time the RTO estimate charges: until measured in the order a
 * promotion reads, greenreplica.initial_read_time (it may be lowered by the
 * operator between batches; a measurement replaces it).
 */
static double
gr_read_s(void)
{
	return sched.read_measured ? sched.model.read_s : gr_initial_read_time_ms / 1000.0;
}

static GrApplyModel
gr_model(void)
{
	GrApplyModel m = sched.model;

	m.read_s = gr_read_s();
	return m;
}

/*
 * The reads of all unapplied WAL: counted where the backlog was decoded
 * (replay paused at its start), the rest at the last known reads per byte.
 */
static double
gr_estimate_reads(uint64 unapplied)
{
	GrBacklog  *b = &sched.backlog;
	double		decoded = 0;
	double		reads = 0;

	if (b->valid && b->start == GetXLogReplayRecPtr(NULL) && b->decoded_to > b->start)
	{
		decoded = (double) (b->decoded_to - b->start);
		reads = (double) b->reads;
		if (decoded >= GR_COST_MIN_BYTES)
			sched.reads_per_byte = reads / decoded;
	}
	if (decoded > (double) unapplied)
		reads *= (double) unapplied / decoded;
	else if (sched.reads_per_byte > 0)
		reads += ((double) unapplied - decoded) * sched.reads_per_byte;
	return reads;
}

/*
 * What waking the volume costs now: its spin-up, and while it still spins
 * down after a sleep request the rest of the spin-down too (a drive cannot
 * cut a spin-down short).
 */
static double
gr_wake_cost(void)
{
	double		cost = sched.volume.spin_up_s;

	if (sched.volume_asleep && sched.asleep_at != 0)
		cost += Max(0, sched.volume.spin_down_s -
					gr_seconds_between(sched.asleep_at, GetCurrentTimestamp()));
	return cost;
}

/* When the volume was last put to sleep; 0 never. */
static TimestampTz
gr_last_spin_down(void)
{
	int			last = (sched.spin_cycle_next + lengthof(sched.spin_cycles) - 1) %
		lengthof(sched.spin_cycles);

	return sched.spin_cycles[last];
}

/* The pace of the day's start/stop budget (gr_plan_pace). */
static void
gr_update_pace(TimestampTz now)
{
	double		oldest_age = -1;
	bool		was_paced;

	for (int i = 0; i < lengthof(sched.spin_cycles); i++)
	{
		double		age;

		if (sched.spin_cycles[i] == 0)
			continue;
		age = gr_seconds_between(sched.spin_cycles[i], now);
		if (age < GR_DAY_S && age > oldest_age)
			oldest_age = age;
	}
	was_paced = sched.pace.paced;
	sched.pace = gr_plan_pace(gr_max_spin_cycles_per_day,
							  gr_spin_cycles_last_day(now), oldest_age);

	/*
	 * From here on a backlog grows past window_size without starting a
	 * batch, which looks like a stalled standby in a short run: say so once.
	 */
	if (sched.pace.paced && !was_paced)
		ereport(LOG,
				(errmsg("greenreplica: %d of %d spin cycles of the last 24 hours are left, batches are paced to one spin cycle every %.0f s at most",
						sched.pace.remaining, gr_max_spin_cycles_per_day,
						sched.pace.min_interval_s),
				 errdetail("Until then neither greenreplica.window_size nor greenreplica.max_apply_delay starts a batch; the RTO bound still does."),
				 errhint("Raise greenreplica.max_spin_cycles_per_day to let batches start more often.")));
	else if (!sched.pace.paced && was_paced)
		ereport(LOG,
				(errmsg("greenreplica: batches are no longer paced, %d of %d spin cycles of the last 24 hours are left",
						sched.pace.remaining, gr_max_spin_cycles_per_day)));
}

/*
 * Whether the pace holds batches back: paced, and the last spin-down more
 * recent than the pace interval.  The RTO bound still starts a batch.
 */
static bool
gr_pace_holds(TimestampTz now)
{
	TimestampTz last = gr_last_spin_down();

	return !gr_plan_pace_allows(&sched.pace,
								last == 0 ? -1 : gr_seconds_between(last, now));
}

/*
 * Plan by time: a batch is due when the backlog's estimated apply time, plus
 * what arrives while the volume spins up, reaches rto - margin - the wake
 * (and the write of the dirty buffers carried, which a promotion is charged).
 * While the pace holds batches back, window_size does not start one.
 */
static void
gr_replan(void)
{
	uint64		unapplied = gr_unapplied_bytes();
	GrApplyModel m = gr_model();
	double		cpu_per_byte = 1.0 / m.replay_rate;
	double		read_per_byte = 0;
	bool		measured;

	sched.backlog_reads = gr_estimate_reads(unapplied);
	if (sched.reads_per_byte > 0)
		read_per_byte = sched.reads_per_byte * m.read_s;

	/*
	 * Infeasibility is declared only on a measured figure: on the measured
	 * part of the cost when it dominates.  An assumed per-read time that
	 * makes the load reach 1 starts small batches at once instead.
	 */
	measured = read_per_byte >= cpu_per_byte ? sched.read_measured : sched.replay_measured;
	gr_update_pace(GetCurrentTimestamp());
	sched.plan = gr_plan_by_time(&m, sched.backlog_reads, (double) unapplied,
								 Max(sched.r_gen, 0), cpu_per_byte + read_per_byte,
								 gr_rto_s - gr_rto_margin_s() - gr_wake_cost() -
								 sched.carried_write_s,
								 sched.volume.spin_up_s + 2.0 * GR_TICK_MS / 1000.0,
								 gr_pace_holds(GetCurrentTimestamp()) ? 0 :
								 (double) gr_window_size_mb * 1024 * 1024,
								 measured);
}

static double
gr_spin_up_remaining(TimestampTz now)
{
	if (sched.phase == GR_PHASE_WAKE)
		return Max(0, gr_seconds_between(now, sched.volume_ready_at));
	return sched.volume_asleep ? sched.volume.spin_up_s : 0;
}

/* Publish what the status view shows. */
static void
gr_publish(TimestampTz now)
{
	uint64		unapplied = gr_unapplied_bytes();
	double		estimate = gr_spin_up_remaining(now);
	TimestampTz next_batch = 0;
	double		oldest_age = gr_oldest_unapplied_age(now);
	GrWalSource src;

	gr_read_wal_source(&src);

	/*
	 * The time to apply what is unapplied: from the time model while the
	 * backlog is counted (SLEEP), in proportion to the batch's own estimate
	 * while a batch works on it, and during a promotion from the progress
	 * replay has actually made since the request (the model's figure until
	 * a second of it is seen).
	 */
	if (sched.phase == GR_PHASE_PROMOTING && sched.promote_seen_at != 0)
	{
		double		elapsed = gr_seconds_between(sched.promote_seen_at, now);
		XLogRecPtr	replayed = GetXLogReplayRecPtr(NULL);

		if (elapsed >= 1.0 && replayed > sched.promote_replayed)
			estimate = (double) unapplied /
				((double) (replayed - sched.promote_replayed) / elapsed);
		else
			estimate = Max(0, sched.promote_estimate_s - elapsed);
	}
	else if ((sched.phase == GR_PHASE_WAKE || sched.phase == GR_PHASE_PREFETCH ||
			  sched.phase == GR_PHASE_APPLY || sched.phase == GR_PHASE_FLUSH) &&
			 sched.batch_bytes > 0)
	{
		double		in_batch = Min((double) unapplied, (double) sched.batch_bytes);
		double		beyond = (double) unapplied - in_batch;
		GrApplyModel m = gr_model();

		estimate += sched.batch_estimate_s * in_batch / (double) sched.batch_bytes +
			gr_plan_apply_seconds(&m, beyond * Max(sched.reads_per_byte, 0), beyond);
	}
	else
		estimate += sched.plan.apply_s;
	/* the carried buffers a recovery's end may have to write */
	estimate += sched.carried_write_s;

	if (sched.phase == GR_PHASE_SLEEP && sched.plan.feasible)
		next_batch = gr_after_seconds(now, sched.plan.until_due_s);
	if (sched.phase == GR_PHASE_SLEEP && unapplied > 0 && gr_max_apply_delay_s > 0 &&
		!gr_pace_holds(now))
	{
		TimestampTz by_delay = gr_after_seconds(now,
												Max(0, gr_max_apply_delay_s - gr_oldest_unapplied_age(now)));

		if (next_batch == 0 || by_delay < next_batch)
			next_batch = by_delay;
	}

	SpinLockAcquire(&gr_state->mutex);
	gr_state->r_gen = sched.r_gen;
	gr_state->r_apl = sched.r_apl;
	gr_state->r_apl_measured = sched.r_apl_measured;
	gr_state->unapplied_bytes = unapplied;
	gr_state->rto_budget_s = gr_rto_s - gr_rto_margin_s() - sched.volume.spin_up_s -
		sched.carried_write_s;
	gr_state->rto_estimate_s = estimate;
	gr_state->max_unapplied_bytes = isfinite(sched.plan.max_unapplied_bytes) ?
		(uint64) Max(0, sched.plan.max_unapplied_bytes) :
		(uint64) gr_window_size_mb * 1024 * 1024;
	gr_state->feasible = sched.plan.feasible;
	gr_state->next_batch_at = next_batch;
	gr_state->spin_cycles_today = gr_spin_cycles_last_day(now);
	gr_state->agent_state = sched.agent_state;
	strlcpy(gr_state->agent_message, sched.agent_message, GR_MESSAGE_LEN);
	if (sched.agent_state == GR_AGENT_ABSENT)
		strlcpy(gr_state->volume_state, "unmanaged", GR_STATE_LEN);
	else if (sched.agent_state == GR_AGENT_ERROR)
		strlcpy(gr_state->volume_state, "unknown", GR_STATE_LEN);
	else
		strlcpy(gr_state->volume_state, sched.volume.state, GR_STATE_LEN);
	gr_state->volume_state_at = sched.agent_state == GR_AGENT_CONNECTED ?
		sched.volume_state_at : 0;
	gr_state->oldest_unapplied_age_s = oldest_age;
	if (sched.volume_asleep && sched.agent_state == GR_AGENT_CONNECTED &&
		sched.asleep_ios >= 0 && sched.volume.ios >= 0)
	{
		gr_state->sleep_volume_ios = sched.volume.ios - sched.asleep_ios;
		gr_state->sleep_volume_spin_ups = sched.asleep_spin_ups >= 0 && sched.volume.spin_ups >= 0 ?
			sched.volume.spin_ups - sched.asleep_spin_ups : -1;
	}
	else
	{
		gr_state->sleep_volume_ios = -1;
		gr_state->sleep_volume_spin_ups = -1;
	}
	strlcpy(gr_state->wal_receiver, gr_walrcv_state_name(src.state), GR_STATE_LEN);
	gr_state->spin_up_s = sched.volume.spin_up_s;
	gr_state->break_even_s = sched.volume.break_even_s;
	gr_state->unapplied_reads = sched.backlog_reads;
	gr_state->read_time_s = gr_read_s();
	gr_state->read_time_measured = sched.read_measured;
	gr_state->replay_rate = sched.model.replay_rate;
	gr_state->carried_dirty_buffers = (uint64) Max(0, sched.carried_dirty);
	gr_state->carried_write_s = sched.carried_write_s;
	strlcpy(gr_state->write_back, sched.write_back, GR_MESSAGE_LEN);
	gr_state->spin_cycle_budget = gr_max_spin_cycles_per_day;
	gr_state->paced = sched.pace.paced;
	gr_state->pace_interval_s = sched.pace.min_interval_s;
	if (sched.phase == GR_PHASE_APPLY && sched.apply_to > sched.apply_window_from)
	{
		XLogRecPtr	replayed = GetXLogReplayRecPtr(NULL);

		/* APPLY's progress: WAL bytes of the window replayed */
		gr_state->step_done = replayed > sched.apply_window_from ?
			(double) Min(replayed, sched.apply_to) - sched.apply_window_from : 0;
		gr_state->step_total = (double) (sched.apply_to - sched.apply_window_from);
	}
	SpinLockRelease(&gr_state->mutex);
}

/* Replay as stock PostgreSQL: nothing of ours paused, nothing armed. */
static void
gr_replay_freely(GrPhase phase)
{
	gr_release_replay();
	if (sched.volume_asleep)
	{
		double		ready_in;
		char		err[GR_MESSAGE_LEN];

		if (gr_agent_wake(&ready_in, err, sizeof(err)))
			sched.volume_asleep = false;
	}
	gr_enter(phase);
}

static void
gr_enter_sleep(void)
{
	gr_pause_replay();
	gr_enter(GR_PHASE_SLEEP);
}

static bool
gr_promotion_requested(void)
{
	return PromoteIsTriggered() || access(GR_PROMOTE_SIGNAL_FILE, F_OK) == 0;
}

static void
gr_begin_promotion(TimestampTz now)
{
	uint64		unapplied = gr_unapplied_bytes();

	sched.promote_seen_at = now;
	sched.promote_replayed = GetXLogReplayRecPtr(NULL);
	gr_replan();
	sched.promote_estimate_s = gr_spin_up_remaining(now) + sched.plan.apply_s +
		sched.carried_write_s;
	gr_replay_freely(GR_PHASE_PROMOTING);
	if (sched.agent_state == GR_AGENT_CONNECTED)
	{
		double		ready_in;
		char		err[GR_MESSAGE_LEN];

		/* also when the agent's idle timeout spun it down on its own */
		(void) gr_agent_wake(&ready_in, err, sizeof(err));
		sched.volume_asleep = false;
	}
	gr_set_note("promotion requested: replaying the remaining WAL");
	ereport(LOG,
			(errmsg("greenreplica: promotion requested with " UINT64_FORMAT " bytes of WAL unapplied; replaying at once",
					unapplied),
			 errdetail("Estimated %.1f s: about %.0f block reads at %.1f ms%s, the WAL at %.1f MB/s%s, and the volume's spin-up.",
					   sched.promote_estimate_s, sched.backlog_reads, gr_read_s() * 1000.0,
					   sched.read_measured ? " (measured)" : " (assumed)",
					   sched.model.replay_rate / (1024 * 1024),
					   sched.replay_measured ? " (measured)" : " (assumed)")));
}

static void
gr_finish(TimestampTz now)
{
	/*
	 * The new primary writes to its data volume: have it spinning, even if
	 * the agent's own idle timeout put it to sleep behind our back.
	 */
	if (sched.volume_asleep || sched.agent_state == GR_AGENT_CONNECTED)
	{
		double		ready_in;
		char		err[GR_MESSAGE_LEN];

		if (gr_agent_wake(&ready_in, err, sizeof(err)))
			sched.volume_asleep = false;
		else
			ereport(LOG,
					(errmsg("greenreplica: could not wake the data volume at the end of recovery: %s", err)));
	}

	if (sched.promote_seen_at != 0)
	{
		double		took = gr_seconds_between(sched.promote_seen_at, now);

		SpinLockAcquire(&gr_state->mutex);
		gr_state->last_promotion_s = took;
		SpinLockRelease(&gr_state->mutex);
		ereport(LOG,
				(errmsg("greenreplica: recovery ended %.3f s after the promote request (greenreplica.rto = %d s)",
						took, gr_rto_s)));
	}
	else
		ereport(LOG,
				(errmsg("greenreplica scheduler exiting: recovery has ended")));
	proc_exit(0);
}

static bool
gr_take_batch_request(void)
{
	bool		requested;

	SpinLockAcquire(&gr_state->mutex);
	requested = gr_state->batch_requested;
	gr_state->batch_requested = false;
	SpinLockRelease(&gr_state->mutex);
	return requested;
}

/* The batch's work starts: what its apply rate is measured from. */
static void
gr_begin_work(TimestampTz now)
{
	if (sched.work_started)
		return;
	sched.work_started = true;
	sched.apply_start = now;
	sched.apply_from = GetXLogReplayRecPtr(NULL);
	sched.records_at_apply = pg_atomic_read_u64(&gr_state->records_replayed);
}

/* Resume replay up to the end of the current window, "to". */
static void
gr_start_apply(TimestampTz now, XLogRecPtr to)
{
	XLogRecPtr	replayed = GetXLogReplayRecPtr(NULL);

	gr_begin_work(now);
	sched.apply_to = to;
	sched.apply_phase_at = now;
	sched.apply_window_from = replayed;
	gr_enter(GR_PHASE_APPLY);
	gr_set_step("apply");

	/* The stop's pause, when it fires, is the scheduler's. */
	sched.pause_owned = true;
	if (sched.apply_to > replayed)
	{
		pg_atomic_write_u64(&gr_state->stop_lsn, sched.apply_to);
		if (!gr_operator_paused())
			SetRecoveryPause(false);
	}
}

/* Compaction work stops at once for a promotion or a shutdown. */
static bool
gr_work_must_stop(void)
{
	return ShutdownRequestPending || gr_promotion_requested();
}

/* Note when the redo pointer moves: a restartpoint, ours or the checkpointer's. */
static void
gr_track_restartpoints(TimestampTz now)
{
	XLogRecPtr	redo = GetRedoRecPtr();

	if (redo != sched.restartpoint_redo)
	{
		if (!XLogRecPtrIsInvalid(sched.restartpoint_redo))
			sched.restartpoint_at = now;
		sched.restartpoint_redo = redo;
	}
}

/*
 * Whether a restartpoint is owed: a checkpoint record was replayed whose
 * redo pointer is past the last completed restartpoint's, whoever took that
 * one (FLUSH, the checkpointer on its own, an operator's CHECKPOINT).  It
 * compares with pg_control's redo pointer, which moves when a restartpoint
 * ends, not with the shared one (GetRedoRecPtr), which moves when it
 * begins: one under way at FLUSH is still owed, and FLUSH's immediate
 * request makes it finish before the volume sleeps.  Once FLUSH has asked
 * for one at that checkpoint it is not owed again (the checkpointer skips a
 * restartpoint it may not take, e.g. with invalid pages referenced).
 */
static bool
gr_restartpoint_owed(XLogRecPtr checkpoint_redo)
{
	XLogRecPtr	restartpoint_redo;
	TimeLineID	restartpoint_tli;

	GetOldestRestartPoint(&restartpoint_redo, &restartpoint_tli);
	return checkpoint_redo > restartpoint_redo &&
		checkpoint_redo != sched.restartpoint_requested;
}

/*
 * Whether a restartpoint is due at a batch end reached at "upto", with a
 * checkpoint record replayed since the last restartpoint, when the volume
 * then sleeps idle_s (gr_plan_restartpoint_due).
 */
static bool
gr_restartpoint_due(TimestampTz now, XLogRecPtr upto, double idle_s)
{
	XLogRecPtr	redo;

	gr_track_restartpoints(now);
	redo = GetRedoRecPtr();
	return gr_plan_restartpoint_due(true,
									sched.restartpoint_at == 0 ? -1 :
									gr_seconds_between(sched.restartpoint_at, now),
									idle_s, (double) CheckPointTimeout,
									upto > redo ? (double) (upto - redo) : 0,
									(double) max_wal_size_mb * 1024 * 1024);
}

/*
 * Decode the next window of the batch, from the replay position to the
 * batch end (or to a split, when its reads would not fit in memory).
 */
static void
gr_decode_window(void)
{
	GrWindow   *w = &sched.window;
	GrBatchCompaction *c = &sched.compaction;
	GrFoldFigures f;

	/*
	 * Without compaction nothing is prefetched: the window is decoded only
	 * for its last record boundary, and must not split for reads (only for
	 * the memory of its block set).
	 */
	gr_set_step("decode");
	gr_window_decode(w, GetXLogReplayRecPtr(NULL), sched.batch_end,
					 sched.compacting ? gr_prefetch_max_reads() : PG_UINT64_MAX,
					 gr_work_must_stop);
	gr_set_step(NULL);
	/* The record the batch end fell into is the next batch's. */
	if (w->ends_before_partial_record)
		sched.batch_end = w->apply_to;
	f = gr_fold_figures(&w->fold);
	/*
	 * With carrying, a window ends at its last checkpoint record when a
	 * restartpoint will be due at this batch end (the next sleep taken as
	 * long as the last one) and that keeps most of the window: the
	 * restartpoint that writes the carried buffers back then falls at the
	 * batch end and recycles the WAL before it.  The blocks decoded past it
	 * serve the next batch.
	 */
	if (gr_carry_dirty_buffers && sched.compacting && !w->split && !w->aborted &&
		!w->incomplete && w->last_checkpoint_end != InvalidXLogRecPtr &&
		gr_restartpoint_due(GetCurrentTimestamp(), w->last_checkpoint_end,
							sched.flush_end_at == 0 ? INFINITY :
							gr_seconds_between(sched.flush_end_at, sched.batch_start)))
	{
		XLogRecPtr	end = gr_plan_window_end(w->start, w->apply_to,
											 w->last_checkpoint_end,
											 GR_CHECKPOINT_END_MIN_SHARE);

		if (end < w->apply_to)
		{
			w->apply_to = end;
			sched.batch_end = end;
			sched.ended_at_checkpoint = true;
		}
	}
	c->windows++;
	c->records += w->records;
	c->block_refs += f.block_refs;
	c->distinct_blocks += f.distinct_blocks;
	c->reads_needed += f.reads_needed;
	c->reads_avoided += f.reads_avoided;
	c->decode_seconds += w->decode_seconds;
	c->index_bytes += f.index_bytes;
	if (w->split)
		c->splits++;
	if (w->incomplete)
		ereport(DEBUG1,
				(errmsg_internal("greenreplica window decode stopped short: %s", w->message)));
	ereport(DEBUG1,
			(errmsg_internal("greenreplica window %X/%X..%X/%X%s: " UINT64_FORMAT " records, " UINT64_FORMAT " block references, " UINT64_FORMAT " distinct blocks, " UINT64_FORMAT " reads needed in %.3f s",
							 LSN_FORMAT_ARGS(w->start), LSN_FORMAT_ARGS(w->apply_to),
							 w->split ? " (split)" : "",
							 w->records, f.block_refs, f.distinct_blocks,
							 f.reads_needed, w->decode_seconds)));
}

/*
 * Tell the agent which extents of the volume the window will read.  The
 * hint is advisory: a refusal or a failure is logged and changes nothing.
 */
static void
gr_hint_window(void)
{
	GrHintExtents hint;
	char		err[GR_MESSAGE_LEN];
	int			recorded;

	if (sched.agent_state != GR_AGENT_CONNECTED)
		return;
	gr_window_hint_extents(&sched.window, &hint);
	if (hint.count == 0)
		return;
	gr_align_window(&sched.window, &hint);
	if (gr_agent_hint(hint.extents, hint.count, &recorded, err, sizeof(err)))
		sched.compaction.hint_extents += recorded;
	else
		ereport(DEBUG1,
				(errmsg_internal("greenreplica: storage agent did not take the hint of %d extents: %s",
								 hint.count, err)));
}

/*
 * Whether replay is paused with its last replayed record ending at "at".  A
 * pause just requested takes effect when the startup process has read the
 * next record: wait a moment for it.
 */
static bool
gr_replay_held_at(XLogRecPtr at)
{
	for (int i = 0; i < 100 && GetRecoveryPauseState() == RECOVERY_PAUSE_REQUESTED; i++)
	{
		if (gr_work_must_stop())
			break;
		pg_usleep(10000L);
	}
	return GetRecoveryPauseState() == RECOVERY_PAUSED &&
		GetXLogReplayRecPtr(NULL) == at;
}

/*
 * PREFETCH the decoded window, then APPLY it.  A promotion request stops
 * the prefetch at once and promotion takes over.
 */
static void
gr_prefetch_and_apply(TimestampTz now)
{
	GrPrefetchResult r;

	if (sched.window.aborted && gr_promotion_requested())
	{
		gr_begin_promotion(GetCurrentTimestamp());
		return;
	}

	gr_begin_work(now);

	/*
	 * The prefetch reads relation blocks without locks, which is safe only
	 * while replay is paused where the window was decoded: nothing then
	 * drops, truncates or extends those relations underneath it.
	 */
	if (!gr_replay_held_at(sched.window.start))
	{
		ereport(LOG,
				(errmsg("greenreplica: prefetch skipped: replay is not paused at the window start %X/%X",
						LSN_FORMAT_ARGS(sched.window.start))));
		gr_start_apply(GetCurrentTimestamp(), sched.window.apply_to);
		return;
	}

	gr_hint_window();
	gr_enter(GR_PHASE_PREFETCH);
	gr_set_step("prefetch");
	gr_set_step_progress(-1, (double) sched.window.fold.reads_needed);
	gr_prefetch_window(&sched.window, &r, gr_work_must_stop);
	gr_set_step(NULL);
	sched.compaction.ios += r.ios;
	sched.compaction.bytes += r.bytes;
	sched.compaction.blocks_read += r.blocks_read;
	sched.compaction.prefetch_seconds += r.seconds;
	sched.compaction.gap_blocks += r.gap_blocks;
	sched.compaction.blocks_cached += r.blocks_cached;
	ereport(DEBUG1,
			(errmsg_internal("greenreplica prefetch%s: " UINT64_FORMAT " blocks planned, " UINT64_FORMAT " read in " UINT64_FORMAT " I/Os, " UINT64_FORMAT " already cached, " UINT64_FORMAT " skipped, in %.3f s",
							 r.aborted ? " (aborted)" : "", r.blocks_planned, r.blocks_read,
							 r.ios, r.blocks_cached, r.blocks_skipped, r.seconds)));
	if (r.aborted)
	{
		if (gr_promotion_requested())
		{
			SpinLockAcquire(&gr_state->mutex);
			gr_state->prefetches_aborted++;
			SpinLockRelease(&gr_state->mutex);
			ereport(LOG,
					(errmsg("greenreplica: prefetch stopped for promotion after " UINT64_FORMAT " of " UINT64_FORMAT " blocks",
							r.blocks_read + r.blocks_cached + r.blocks_skipped,
							r.blocks_planned)));
			gr_begin_promotion(GetCurrentTimestamp());
			return;
		}
	}
	gr_start_apply(GetCurrentTimestamp(), sched.window.apply_to);
}

/* Where a batch without compaction stops. */
static XLogRecPtr
gr_plain_apply_to(void)
{
	return sched.batch_capped ? sched.window.apply_to : sched.batch_end;
}

/*
 * Wake the sleeping volume for a batch.  When the decoded window reads
 * nothing from the volume (gr_wake.h), the wake says so: "writes_only" with
 * the extents the window writes, so a layout with a flash buffer (QMD) takes
 * the write-back in flash and leaves its sleeping disks down.  An agent
 * that refuses it gets a plain wake.
 */
static void
gr_wake_for_batch(TimestampTz now, bool decoded)
{
	double		ready_in = 0;
	char		err[GR_MESSAGE_LEN];
	GrWakeKind	kind = GR_WAKE_PLAIN;
	const char *why = "the window was not decoded before the wake";
	GrHintExtents writes = {0};
	bool		woken = false;
	bool		cuts_batch = false;

	if (decoded)
	{
		GrWakeInputs in;

		gr_set_step("wake decision");
		gr_window_wake_inputs(&sched.window, &in);
		if ((in.decoded_whole || in.split_on_reads) && gr_wake_reads_left(&in) == 0)
		{
			gr_window_write_extents(&sched.window, &writes);
			in.write_extents_complete = !writes.truncated;
		}
		kind = gr_wake_kind(&in, &why);
		cuts_batch = gr_wake_cuts_batch(&in, kind);
		gr_set_step(NULL);
	}
	if (kind == GR_WAKE_WRITES_ONLY)
	{
		woken = gr_agent_wake_writes_only(writes.extents, writes.count,
										  &ready_in, err, sizeof(err));

		/*
		 * A window split at its read bound promised only its own writes:
		 * the batch ends at the split, the rest is the next batch's, with
		 * a wake decided from its own window.
		 */
		if (woken && cuts_batch)
			sched.batch_end = sched.window.apply_to;
		if (!woken)
		{
			ereport(DEBUG1,
					(errmsg_internal("greenreplica: storage agent refused a write-only wake: %s", err)));
			kind = GR_WAKE_PLAIN;
		}
	}
	if (!woken)
		woken = gr_agent_wake(&ready_in, err, sizeof(err));
	ereport(DEBUG1,
			(errmsg_internal("greenreplica: %s wake: %s (%d extents written)",
							 kind == GR_WAKE_WRITES_ONLY ? "write-only" : "plain",
							 why, writes.count)));
	if (!woken)
	{
		/* The volume wakes on first I/O anyway; go on. */
		gr_agent_failed("wake", err);
		ready_in = 0;
	}
	else
	{
		gr_refresh_agent(now, true);
		if (kind == GR_WAKE_WRITES_ONLY)
		{
			SpinLockAcquire(&gr_state->mutex);
			gr_state->write_only_batches++;
			SpinLockRelease(&gr_state->mutex);
		}
	}
	sched.volume_asleep = false;
	sched.volume_ready_at = gr_after_seconds(now, ready_in);
	gr_enter(GR_PHASE_WAKE);
}

/*
 * Start a batch that applies what was received until now.  "compact" is
 * false when replay is running already (after an operator's resume): a
 * window that moves while it is decoded cannot be prefetched.
 */
static void
gr_start_batch(TimestampTz now, bool compact)
{
	bool		waking = false;
	bool		decoded = false;

	XLogRecPtr	received = gr_received_lsn();
	XLogRecPtr	window_cap = GetXLogReplayRecPtr(NULL) +
		(uint64) gr_window_size_mb * 1024 * 1024;

	sched.batch_start = now;
	sched.batch_capped = received > window_cap;
	sched.batch_end = sched.batch_capped ? window_cap : received;
	sched.work_started = false;
	sched.compacting = compact && gr_mode == GR_MODE_COMPACT;
	sched.ended_at_checkpoint = false;
	memset(&sched.compaction, 0, sizeof(sched.compaction));

	/*
	 * The batch's estimate, for the status and for measuring the model when
	 * the batch is done: the backlog counted a little further toward the
	 * batch's end (replay is held at its start unless the operator resumed
	 * it), the rest at its reads per byte.  Never the whole backlog: after
	 * each batch the count starts again from the new replay position, and a
	 * backlog many windows long would be decoded once per window.
	 */
	if (compact && sched.phase == GR_PHASE_SLEEP)
		gr_backlog_advance(&sched.backlog, 4 * GR_BACKLOG_RECORDS_PER_TICK, sched.batch_end);
	sched.batch_bytes = sched.batch_end > GetXLogReplayRecPtr(NULL) ?
		sched.batch_end - GetXLogReplayRecPtr(NULL) : 0;
	sched.batch_reads = gr_estimate_reads(sched.batch_bytes);
	{
		GrApplyModel m = gr_model();

		sched.batch_estimate_s = gr_plan_apply_seconds(&m, sched.batch_reads,
													   (double) sched.batch_bytes);
	}
	sched.apply_phase_s = 0;

	if (sched.volume_asleep && sched.agent_state == GR_AGENT_CONNECTED)
	{
		/*
		 * A compacting batch decodes its window first (only pg_wal is
		 * read): whether the window reads the volume at all decides the
		 * wake.  A promotion that stopped the decode wakes the volume
		 * itself.
		 */
		if (sched.compacting)
		{
			gr_decode_window();
			decoded = true;
			if (sched.window.aborted && gr_promotion_requested())
			{
				gr_prefetch_and_apply(GetCurrentTimestamp());
				return;
			}
		}
		gr_wake_for_batch(GetCurrentTimestamp(), decoded);
		waking = true;
	}

	/*
	 * Otherwise decoding overlaps the spin-up.  Without compaction, a batch
	 * cut by window_size is decoded too, for the last record boundary
	 * within the window: the batch ends at or before it.
	 */
	if (!decoded && (sched.compacting || sched.batch_capped))
		gr_decode_window();

	if (waking)
		return;
	if (sched.compacting)
		gr_prefetch_and_apply(now);
	else
		gr_start_apply(now, gr_plain_apply_to());
}

/* Decide whether the volume may sleep until the next batch, and ask. */
static void
gr_put_volume_to_sleep(TimestampTz now)
{
	double		idle_s;
	double		worst_s;
	int			cycles = gr_spin_cycles_last_day(now);
	bool		spends_cycle;
	bool		declined;
	char		err[GR_MESSAGE_LEN];

	/*
	 * FLUSH may have blocked for long in a restartpoint or a sync: a
	 * promotion requested meanwhile needs the volume spinning.
	 */
	if (gr_promotion_requested() || !RecoveryInProgress())
		return;

	if (sched.agent_state != GR_AGENT_CONNECTED)
	{
		gr_set_note(sched.agent_state == GR_AGENT_ABSENT ?
					"batching without a storage agent: the volume is not spun down" :
					"storage agent unavailable: the volume is not spun down");
		return;
	}

	idle_s = isfinite(sched.plan.until_due_s) ?
		Min(sched.plan.until_due_s, (double) GR_DAY_S) : (double) GR_DAY_S;
	/* WAL arriving at once is applied within the staleness bound at the latest */
	if (gr_max_apply_delay_s > 0 && !sched.pace.paced)
		idle_s = Min(idle_s, Max(0, gr_max_apply_delay_s - gr_oldest_unapplied_age(now)));
	if (idle_s < sched.volume.break_even_s)
	{
		gr_set_note("volume kept spinning: expected idle %.2f s is below the break-even time %.2f s",
					idle_s, sched.volume.break_even_s);
		return;
	}

	/*
	 * A drive cannot cut a spin-down short: a promotion requested while the
	 * volume spins down waits for the spin-down, then the spin-up.  Sleep
	 * only when that, with what arrives meanwhile, still fits the RTO.
	 */
	worst_s = sched.volume.spin_down_s + sched.volume.spin_up_s + sched.plan.apply_s +
		sched.plan.load * sched.volume.spin_down_s + sched.carried_write_s;
	if (worst_s > gr_rto_s - gr_rto_margin_s())
	{
		gr_set_note("volume kept spinning: a promotion during its spin-down would take %.1f s (spin-down %.1f s, spin-up %.1f s, apply %.1f s), more than greenreplica.rto less its margin (%.1f s)",
					worst_s, sched.volume.spin_down_s, sched.volume.spin_up_s,
					sched.plan.apply_s + sched.plan.load * sched.volume.spin_down_s,
					gr_rto_s - gr_rto_margin_s());
		return;
	}

	/*
	 * The budget counts start/stop cycles of the disks: a batch whose wake
	 * spun none up (a write-only wake kept the disks asleep) spends none.
	 */
	gr_refresh_agent(now, true);
	if (sched.agent_state != GR_AGENT_CONNECTED)
		return;
	spends_cycle = gr_plan_sleep_spends_cycle(sched.cycle_spin_ups,
											  sched.volume.spin_ups);
	if (spends_cycle && cycles >= gr_max_spin_cycles_per_day)
	{
		gr_set_note("volume kept spinning: %d of %d spin cycles used in the last 24 hours",
					cycles, gr_max_spin_cycles_per_day);
		return;
	}

	gr_set_step("agent sleep request");
	if (gr_agent_sleep(idle_s, &declined, err, sizeof(err)))
	{
		gr_agent_answered();
		gr_refresh_agent(now, true);
		sched.asleep_ios = sched.volume.ios;
		sched.asleep_spin_ups = sched.volume.spin_ups;
		sched.volume_asleep = true;
		sched.asleep_at = now;
		if (spends_cycle)
		{
			sched.spin_cycles[sched.spin_cycle_next] = now;
			sched.spin_cycle_next = (sched.spin_cycle_next + 1) % lengthof(sched.spin_cycles);
			sched.cycle_spin_ups = sched.volume.spin_ups;
			gr_set_note("volume asleep until the next batch (expected idle %.1f s)", idle_s);
		}
		else
			gr_set_note("volume asleep until the next batch (expected idle %.1f s); no disk spun up since the last sleep, no spin cycle spent",
						idle_s);
	}
	else if (declined)
	{
		gr_agent_answered();
		gr_set_note("storage agent declined to spin the volume down: %s", err);
	}
	else
		gr_agent_failed("sleep", err);
}

/*
 * Measure the time model from the batch just applied.  With compaction every
 * block was read ahead, sorted: APPLY is replay's CPU work, and PREFETCH
 * gives the per-read time of sorted reads, which is shown but never charged
 * to the RTO (a promotion reads in LSN order).  Without compaction APPLY
 * read the blocks itself, in LSN order as a promotion does: what the CPU
 * work does not explain is the per-read time.
 */
static void
gr_learn_model(uint64 bytes)
{
	double		apply_s = sched.apply_phase_s;

	if (!(apply_s > 0))
		return;
	if (sched.compacting)
	{
		if (sched.compaction.blocks_read >= GR_READ_SAMPLE_MIN_READS &&
			sched.compaction.prefetch_seconds > 0)
		{
			double		sample = sched.compaction.prefetch_seconds /
				(double) sched.compaction.blocks_read;

			sched.read_s_sorted = sched.read_s_sorted < 0 ? sample :
				GR_R_APL_WEIGHT * sample + (1 - GR_R_APL_WEIGHT) * sched.read_s_sorted;
		}
		if (bytes >= GR_R_APL_MIN_BYTES)
		{
			double		sample = (double) bytes / apply_s;

			sched.model.replay_rate = sched.replay_measured ?
				GR_R_APL_WEIGHT * sample + (1 - GR_R_APL_WEIGHT) * sched.model.replay_rate : sample;
			sched.replay_measured = true;
		}
	}
	else
	{
		double		sample = gr_plan_read_sample(apply_s, sched.batch_reads, (double) bytes,
												 sched.replay_measured ? sched.model.replay_rate : 0,
												 GR_READ_SAMPLE_MIN_READS);

		if (sample > 0)
		{
			sched.model.read_s = sched.read_measured ?
				GR_R_APL_WEIGHT * sample + (1 - GR_R_APL_WEIGHT) * sched.model.read_s : sample;
			sched.read_measured = true;
		}
		else if (sched.batch_reads < GR_READ_SAMPLE_MIN_READS && bytes >= GR_R_APL_MIN_BYTES)
		{
			double		rate = (double) bytes / apply_s;

			sched.model.replay_rate = sched.replay_measured ?
				GR_R_APL_WEIGHT * rate + (1 - GR_R_APL_WEIGHT) * sched.model.replay_rate : rate;
			sched.replay_measured = true;
		}
	}
	ereport(DEBUG1,
			(errmsg_internal("greenreplica time model: %.0f reads and " UINT64_FORMAT " bytes applied in %.3f s (estimated %.3f s); read %.2f ms%s, sorted read %.2f ms, replay %.1f MB/s%s",
							 sched.batch_reads, bytes, apply_s, sched.batch_estimate_s,
							 gr_read_s() * 1000.0, sched.read_measured ? " (measured)" : " (assumed)",
							 sched.read_s_sorted * 1000.0,
							 sched.model.replay_rate / (1024 * 1024),
							 sched.replay_measured ? " (measured)" : " (assumed)")));
}

/*
 * FLUSH's write-back decision: write the dirty buffers back now (with a
 * restartpoint when one is owed), or carry them to a
 * later batch (only when no restartpoint is due).  Returns the
 * buffers written; sets sched.carried_*.
 */
static int
gr_write_back_or_carry(TimestampTz now, XLogRecPtr applied_to)
{
	XLogRecPtr	checkpoint_redo = pg_atomic_read_u64(&gr_state->last_checkpoint_redo);
	bool		restartpoint_owed = gr_restartpoint_owed(checkpoint_redo);
	GrWriteBack verdict = GR_WB_DISABLED;
	int			written = 0;

	gr_track_restartpoints(now);
	if (gr_carry_dirty_buffers)
	{
		GrCarryInput in;
		double		dirty = gr_count_dirty_buffers();
		double		idle_s;
		bool		restartpoint_due;

		gr_replan();
		idle_s = isfinite(sched.plan.until_due_s) ? sched.plan.until_due_s : INFINITY;
		if (gr_max_apply_delay_s > 0 && !sched.pace.paced)
			idle_s = Min(idle_s, (double) gr_max_apply_delay_s);
		/* a window ended at its checkpoint record for this restartpoint */
		restartpoint_due = restartpoint_owed &&
			(sched.ended_at_checkpoint || gr_restartpoint_due(now, applied_to, idle_s));
		in.enabled = true;
		in.bgwriter_writes = bgwriter_lru_maxpages > 0;
		in.restartpoint_due = restartpoint_due;
		in.dirty_buffers = dirty;
		/* the next batch dirties about what this one did */
		in.next_batch_blocks = Max(0, dirty - sched.carried_dirty);
		in.nbuffers = NBuffers;
		in.max_dirty_share = GR_CARRY_MAX_DIRTY_SHARE;
		in.write_s = sched.write_s > 0 ? sched.write_s : gr_initial_read_time_ms / 1000.0;
		in.budget_s = gr_rto_s - gr_rto_margin_s() - sched.volume.spin_up_s;
		in.max_budget_share = GR_CARRY_MAX_BUDGET_SHARE;
		verdict = gr_plan_write_back(&in);
		if (verdict == GR_WB_CARRY)
		{
			gr_set_step("sync");
			gr_sync_data();
			sched.carried_dirty = dirty;
			sched.carried_write_s = gr_plan_carried_write_s(dirty, in.write_s);
			snprintf(sched.write_back, sizeof(sched.write_back),
					 "%.0f dirty buffers carried (%.1f s to write)",
					 dirty, sched.carried_write_s);
			return 0;
		}
	}

	/*
	 * Not carried: a restartpoint at the window's checkpoint (due or not)
	 * also lets WAL be recycled, and costs little once everything is
	 * written anyway.
	 */
	if (restartpoint_owed)
	{
		gr_set_step("restartpoint");
		RequestCheckpoint(CHECKPOINT_IMMEDIATE | CHECKPOINT_FORCE | CHECKPOINT_WAIT);
		sched.restartpoint_requested = checkpoint_redo;
		gr_track_restartpoints(GetCurrentTimestamp());
		SpinLockAcquire(&gr_state->mutex);
		gr_state->restartpoints++;
		SpinLockRelease(&gr_state->mutex);
	}
	gr_set_step("write-back and sync");
	{
		TimestampTz start = GetCurrentTimestamp();
		double		took;

		written = gr_write_back();
		took = gr_seconds_between(start, GetCurrentTimestamp());
		/* what a burst costs per buffer, sync included: charged to carrying */
		if (written >= GR_WRITE_SAMPLE_MIN_BUFFERS && took > 0)
			sched.write_s = sched.write_s > 0 ?
				GR_R_APL_WEIGHT * (took / written) + (1 - GR_R_APL_WEIGHT) * sched.write_s :
				took / written;
	}
	sched.carried_dirty = 0;
	sched.carried_write_s = 0;
	snprintf(sched.write_back, sizeof(sched.write_back), "written back: %s",
			 gr_plan_write_back_message(verdict));
	return written;
}

static void
gr_flush_batch(TimestampTz now)
{
	XLogRecPtr	applied_to = GetXLogReplayRecPtr(NULL);
	uint64		bytes = applied_to > sched.apply_from ? applied_to - sched.apply_from : 0;
	uint64		records = pg_atomic_read_u64(&gr_state->records_replayed) - sched.records_at_apply;
	int			written;
	TimestampTz flush_start = GetCurrentTimestamp();
	TimestampTz done;
	double		seconds;
	double		wake_s;
	double		prefetch_s;
	double		flush_s;
	double		apply_s;

	gr_enter(GR_PHASE_FLUSH);

	/* Hold replay where it is, in case the stop did not fire. */
	gr_pause_replay();
	pg_atomic_write_u64(&gr_state->stop_lsn, InvalidXLogRecPtr);

	written = gr_write_back_or_carry(flush_start, applied_to);

	done = GetCurrentTimestamp();
	seconds = gr_seconds_between(sched.apply_start, done);
	if (bytes >= GR_R_APL_MIN_BYTES && seconds > 0)
	{
		double		sample = (double) bytes / seconds;

		sched.r_apl = sched.r_apl_measured ?
			GR_R_APL_WEIGHT * sample + (1 - GR_R_APL_WEIGHT) * sched.r_apl : sample;
		sched.r_apl_measured = true;
	}
	gr_learn_model(bytes);

	/* where the batch's time went (wake includes the decode) */
	wake_s = gr_seconds_between(sched.batch_start, sched.apply_start);
	prefetch_s = sched.compacting ? sched.compaction.prefetch_seconds : 0;
	flush_s = gr_seconds_between(flush_start, done);
	apply_s = Max(0, seconds - prefetch_s - flush_s);

	SpinLockAcquire(&gr_state->mutex);
	gr_state->last_batch_wake_s = wake_s;
	gr_state->last_batch_prefetch_s = prefetch_s;
	gr_state->last_batch_apply_s = apply_s;
	gr_state->last_batch_flush_s = flush_s;
	gr_state->last_batch_gap_blocks = sched.compacting ? sched.compaction.gap_blocks : 0;
	gr_state->last_batch_blocks_cached = sched.compacting ? sched.compaction.blocks_cached : 0;
	gr_state->batches++;
	gr_state->last_batch_start = sched.batch_start;
	gr_state->last_batch_duration_s = gr_seconds_between(sched.batch_start, done);
	gr_state->last_batch_bytes = bytes;
	gr_state->last_batch_records = records;
	gr_state->last_batch_buffers_flushed = written;
	gr_state->last_batch_compacted = sched.compacting;
	gr_state->last_batch_ended_at_checkpoint = sched.ended_at_checkpoint;
	if (sched.compacting)
	{
		GrBatchCompaction *c = &sched.compaction;

		gr_state->last_batch_windows = c->windows;
		gr_state->last_batch_decoded_records = c->records;
		gr_state->last_batch_block_refs = c->block_refs;
		gr_state->last_batch_distinct_blocks = c->distinct_blocks;
		gr_state->last_batch_reads_needed = c->reads_needed;
		gr_state->last_batch_reads_avoided = c->reads_avoided;
		gr_state->last_batch_fold_ratio = c->distinct_blocks > 0 ?
			(double) c->block_refs / (double) c->distinct_blocks : 0;
		gr_state->last_batch_prefetch_ios = c->ios;
		gr_state->last_batch_prefetch_bytes = c->bytes;
		gr_state->last_batch_sequential_share = c->blocks_read > 0 ?
			(double) (c->blocks_read - c->ios) / (double) c->blocks_read : 0;
		gr_state->last_batch_decode_seconds = c->decode_seconds;
		gr_state->last_batch_hint_extents = c->hint_extents;
		gr_state->last_batch_bytes_per_block = c->distinct_blocks > 0 ?
			(double) c->index_bytes / (double) c->distinct_blocks : 0;
		gr_state->total_block_refs += c->block_refs;
		gr_state->total_distinct_blocks += c->distinct_blocks;
		gr_state->total_reads_avoided += c->reads_avoided;
		gr_state->total_prefetch_ios += c->ios;
		gr_state->total_prefetch_bytes += c->bytes;
		gr_state->window_splits += c->splits;
	}
	SpinLockRelease(&gr_state->mutex);

	ereport(DEBUG1,
			(errmsg_internal("greenreplica batch: " UINT64_FORMAT " bytes, " UINT64_FORMAT " records, %d buffers written in %.3f s",
							 bytes, records, written, seconds)));
	/* R_apl's split, one line a batch (batches are minutes apart) */
	ereport(LOG,
			(errmsg("greenreplica: batch applied " UINT64_FORMAT " bytes of WAL: wake %.3f s, prefetch %.3f s, apply %.3f s, flush %.3f s, %d buffers written",
					bytes, wake_s, prefetch_s, apply_s, flush_s, written),
			 gr_carry_dirty_buffers ? errdetail("%s.", sched.write_back) : 0));

	gr_window_release(&sched.window);
	sched.flush_end_at = GetCurrentTimestamp();
	gr_replan();

	/*
	 * The developer delay: FLUSH blocks here, before its sleep decision, as
	 * a long restartpoint or sync can; it is kept out of the apply rate.
	 */
	if (gr_debug_flush_delay_ms > 0)
		pg_usleep(gr_debug_flush_delay_ms * 1000L);
	gr_put_volume_to_sleep(GetCurrentTimestamp());
	gr_enter_sleep();
}

/*
 * Entering batching from free replay (start-up, a feasible plan again, the
 * agent back): write back what free replay left dirty, so that the volume can
 * sleep until the first batch instead of idling, spun up, until then.
 */
static void
gr_settle_volume(TimestampTz now)
{
	int			written;

	/* Let the pause take effect, so that little is dirtied after the flush. */
	for (int i = 0; i < 100 && GetRecoveryPauseState() != RECOVERY_PAUSED; i++)
	{
		if (gr_promotion_requested())
			return;
		pg_usleep(10000L);
	}

	gr_enter(GR_PHASE_FLUSH);
	gr_set_step("write-back and sync");
	written = gr_write_back();
	sched.carried_dirty = 0;
	sched.carried_write_s = 0;
	ereport(DEBUG1,
			(errmsg_internal("greenreplica: %d buffers written before the first batch", written)));

	gr_put_volume_to_sleep(GetCurrentTimestamp());
	gr_enter(GR_PHASE_SLEEP);
}

static const char *
gr_walrcv_state_name(WalRcvState state)
{
	switch (state)
	{
		case WALRCV_STOPPED:
			return "stopped";
		case WALRCV_STARTING:
			return "starting";
		case WALRCV_STREAMING:
			return "streaming";
		case WALRCV_WAITING:
			return "waiting";
		case WALRCV_RESTARTING:
			return "restarting";
		case WALRCV_STOPPING:
			return "stopping";
	}
	return "unknown";
}

static void
gr_read_wal_source(GrWalSource *src)
{
	SpinLockAcquire(&WalRcv->mutex);
	src->state = WalRcv->walRcvState;
	src->pid = WalRcv->pid;
	src->received_tli = WalRcv->receivedTLI;
	src->flushed = WalRcv->flushedUpto;
	src->latest_end = WalRcv->latestWalEnd;
	SpinLockRelease(&WalRcv->mutex);
}

/* Remember the source settings the running walreceiver was started with. */
static void
gr_remember_source_settings(void)
{
	strlcpy(sched.conninfo_seen, PrimaryConnInfo ? PrimaryConnInfo : "",
			sizeof(sched.conninfo_seen));
	strlcpy(sched.slot_seen, PrimarySlotName ? PrimarySlotName : "",
			sizeof(sched.slot_seen));
}

/*
 * The WAL-source watchdog.  PostgreSQL restarts, re-points and re-times its
 * walreceiver, follows a new timeline and falls back to restore_command only
 * while the startup process waits for WAL, never while it is paused.  Called
 * every tick while the scheduler holds replay; returns false, with the
 * reason in "why", when replay must be released for the startup process to
 * tend its WAL source.
 */
static bool
gr_wal_source_healthy(TimestampTz now, char *why, size_t whylen)
{
	GrWalSource src;
	double		frozen_s;

	gr_read_wal_source(&src);

	if (src.state != WALRCV_STREAMING)
	{
		double		bad_s;

		if (sched.source_bad_since == 0)
			sched.source_bad_since = now;
		bad_s = gr_seconds_between(sched.source_bad_since, now);
		if (bad_s * 1000.0 >= (double) wal_retrieve_retry_interval)
		{
			snprintf(why, whylen, "the walreceiver has not been streaming for %.1f s (state %s)",
					 bad_s, gr_walrcv_state_name(src.state));
			return false;
		}
		return true;
	}
	sched.source_bad_since = 0;

	/* The startup process re-points the walreceiver only when it waits. */
	if (strcmp(sched.conninfo_seen, PrimaryConnInfo ? PrimaryConnInfo : "") != 0 ||
		strcmp(sched.slot_seen, PrimarySlotName ? PrimarySlotName : "") != 0)
	{
		snprintf(why, whylen, "primary_conninfo or primary_slot_name changed");
		sched.source_changed = true;
		return false;
	}

	/* Streaming, yet nothing arrives although the sender has more. */
	if (src.flushed != sched.source_frozen_lsn || src.latest_end <= src.flushed)
	{
		sched.source_frozen_lsn = src.flushed;
		sched.source_frozen_since = now;
		return true;
	}
	frozen_s = gr_seconds_between(sched.source_frozen_since, now);
	if (frozen_s >= Max(10.0, wal_receiver_timeout / 1000.0))
	{
		snprintf(why, whylen, "received WAL stopped at %X/%X for %.0f s while the sender has %X/%X",
				 LSN_FORMAT_ARGS(src.flushed), frozen_s, LSN_FORMAT_ARGS(src.latest_end));
		return false;
	}
	return true;
}

/* Release replay until streaming resumes on the replay timeline. */
static void
gr_source_lost(const char *why)
{
	GrWalSource src;

	gr_read_wal_source(&src);
	sched.source_lost = true;
	sched.source_lost_pid = src.pid;
	gr_replay_freely(GR_PHASE_CONTINUOUS);
	gr_set_note("WAL source needs the startup process (%s): replaying until streaming resumes on the replay timeline",
				why);
	ereport(LOG,
			(errmsg("greenreplica: %s; replay released until streaming resumes on the replay timeline",
					why)));
}

/* Streaming again, on the timeline being replayed (and re-pointed, if asked). */
static bool
gr_source_recovered(void)
{
	GrWalSource src;
	TimeLineID	replay_tli;

	gr_read_wal_source(&src);
	(void) GetXLogReplayRecPtr(&replay_tli);
	if (src.state != WALRCV_STREAMING || src.received_tli != replay_tli)
		return false;
	if (sched.source_changed && src.pid == sched.source_lost_pid)
		return false;

	ereport(LOG,
			(errmsg("greenreplica: streaming resumed on timeline %u; batching resumes",
					replay_tli)));
	sched.source_lost = false;
	sched.source_changed = false;
	sched.source_bad_since = 0;
	sched.source_frozen_lsn = InvalidXLogRecPtr;
	gr_remember_source_settings();
	return true;
}

/*
 * What the operator did with pg_wal_replay_pause() and _resume().  Returns
 * true while the operator's pause holds: then nothing moves.
 */
static bool
gr_follow_operator(TimestampTz now)
{
	bool		paused;
	uint64		resumes;
	bool		resumed;

	SpinLockAcquire(&gr_state->mutex);
	paused = gr_state->operator_paused;
	resumes = gr_state->operator_resumes;
	SpinLockRelease(&gr_state->mutex);

	resumed = resumes != sched.operator_resumes_seen;
	sched.operator_resumes_seen = resumes;

	/* A resume not seen through the hook: the pause vanished under us. */
	if (!resumed && !paused && sched.pause_owned &&
		(sched.phase == GR_PHASE_SLEEP || sched.phase == GR_PHASE_WAKE) &&
		GetRecoveryPauseState() == RECOVERY_NOT_PAUSED)
		resumed = true;

	if (resumed && !paused && sched.pause_owned &&
		(sched.phase == GR_PHASE_SLEEP || sched.phase == GR_PHASE_WAKE))
	{
		/* The operator released our pause: replay runs until the next batch. */
		sched.pause_owned = false;
		sched.resumed_by_operator = true;
		sched.resumed_at = now;
		sched.resumed_at_lsn = gr_received_lsn();
		gr_replay_freely(GR_PHASE_CONTINUOUS);
		gr_set_note("replay resumed by the operator: replaying continuously until the next batch");
		ereport(LOG,
				(errmsg("greenreplica: replay resumed by the operator; replaying continuously until the next batch")));
	}

	if (paused)
		gr_set_note("replay paused by the operator: no batch starts until pg_wal_replay_resume()");
	return paused;
}

/*
 * After an operator's resume, the next batch comes when the cycle would
 * have started one: the plan's backlog, the staleness bound, or a request.
 */
static bool
gr_operator_cycle_done(TimestampTz now, bool batch_requested)
{
	XLogRecPtr	received = gr_received_lsn();

	return batch_requested ||
		(double) (received > sched.resumed_at_lsn ? received - sched.resumed_at_lsn : 0) >=
		sched.plan.max_unapplied_bytes ||
		(gr_max_apply_delay_s > 0 &&
		 gr_seconds_between(sched.resumed_at, now) >= (double) gr_max_apply_delay_s);
}

/* One step of the batch cycle. */
static void
gr_step(TimestampTz now)
{
	bool		batch_requested = gr_take_batch_request();

	/*
	 * At a reached recovery target PostgreSQL pauses (or promotes, or shuts
	 * down) by itself; releasing that pause would promote.  Stand down.
	 */
	if (recoveryTarget != RECOVERY_TARGET_UNSET)
	{
		if (!sched.standing_down)
		{
			gr_replay_freely(GR_PHASE_OFF);
			gr_set_note("a recovery target is configured: greenreplica stands down and leaves replay to PostgreSQL");
			ereport(LOG,
					(errmsg("greenreplica: a recovery target is configured; the scheduler stands down")));
			sched.standing_down = true;
		}
		return;
	}

	if (gr_follow_operator(now))
		return;

	if (gr_mode == GR_MODE_OFF)
	{
		if (sched.phase != GR_PHASE_OFF)
		{
			gr_replay_freely(GR_PHASE_OFF);
			gr_set_note("greenreplica.mode is off: plain PostgreSQL replay");
		}
		return;
	}

	/* Batching needs to see the WAL arrive; archive recovery replays freely. */
	if (XLogRecPtrIsInvalid(gr_received_lsn()))
	{
		if (sched.phase != GR_PHASE_CONTINUOUS)
		{
			gr_replay_freely(GR_PHASE_CONTINUOUS);
			gr_set_note("no streaming replication: WAL is replayed as it is restored");
		}
		return;
	}

	gr_refresh_agent(now, false);
	if (sched.phase == GR_PHASE_SLEEP)
		gr_backlog_advance(&sched.backlog, GR_BACKLOG_RECORDS_PER_TICK, InvalidXLogRecPtr);
	gr_replan();

	switch (sched.phase)
	{
		case GR_PHASE_INACTIVE:
		case GR_PHASE_OFF:
		case GR_PHASE_CONTINUOUS:
			if (sched.source_lost && !gr_source_recovered())
				break;
			if (sched.resumed_by_operator)
			{
				if (sched.agent_state == GR_AGENT_ERROR || !sched.plan.feasible)
					sched.resumed_by_operator = false;
				else
				{
					if (gr_operator_cycle_done(now, batch_requested))
					{
						sched.resumed_by_operator = false;
						gr_start_batch(now, false);
					}
					break;
				}
			}
			if (sched.agent_state == GR_AGENT_ERROR)
			{
				if (sched.phase != GR_PHASE_CONTINUOUS)
					gr_replay_freely(GR_PHASE_CONTINUOUS);
				gr_set_note("storage agent unavailable: plain PostgreSQL replay");
			}
			else if (!sched.plan.feasible)
			{
				if (sched.phase != GR_PHASE_CONTINUOUS)
					gr_replay_freely(GR_PHASE_CONTINUOUS);
				gr_set_note("no feasible batch plan: %s",
							gr_plan_verdict_message(sched.plan.verdict));
				if (!sched.infeasible_logged)
					ereport(WARNING,
							(errmsg("greenreplica cannot meet greenreplica.rto: %s; replaying continuously",
									gr_plan_verdict_message(sched.plan.verdict)),
							 errdetail("greenreplica.rto = %d s, spin-up %.1f s, WAL generation %.0f bytes/s; applying a second of it takes an estimated %.2f s (%.5f reads per byte at %.2f ms%s, replay %.1f MB/s%s).",
									   gr_rto_s, sched.volume.spin_up_s,
									   Max(sched.r_gen, 0), sched.plan.load,
									   Max(sched.reads_per_byte, 0), gr_read_s() * 1000.0,
									   sched.read_measured ? " measured" : " assumed",
									   sched.model.replay_rate / (1024 * 1024),
									   sched.replay_measured ? " measured" : " assumed"),
							 errhint("Raise greenreplica.rto above the volume's spin-up time, or give the standby faster storage or more shared_buffers; until then the standby replays as stock PostgreSQL and saves no energy.")));
				sched.infeasible_logged = true;
			}
			else
			{
				sched.infeasible_logged = false;
				gr_set_note("waiting for the next batch");
				gr_enter_sleep();
				gr_settle_volume(now);
			}
			break;

		case GR_PHASE_SLEEP:
			if (sched.agent_state == GR_AGENT_ERROR || !sched.plan.feasible)
			{
				/* leave batching; the case above explains why */
				gr_replay_freely(GR_PHASE_CONTINUOUS);
				sched.infeasible_logged = false;
				break;
			}
			{
				char		why[GR_MESSAGE_LEN];

				/*
				 * Only a startup process that sits in its pause loop is kept
				 * from its WAL source; one still waiting for the next record
				 * tends the source itself.
				 */
				if (!gr_wal_source_healthy(now, why, sizeof(why)) &&
					GetRecoveryPauseState() == RECOVERY_PAUSED)
				{
					gr_source_lost(why);
					break;
				}
			}
			/*
			 * A batch with nothing to apply would only wake the volume: a
			 * request then finds everything applied already.
			 */
			if (gr_unapplied_bytes() == 0)
				break;
			if (batch_requested || sched.plan.due)
			{
				if (!batch_requested && sched.plan.load >= 1)
					gr_set_note("batch started at once: by the assumed per-read time (%.2f ms) applying takes %.2f s per second of WAL; batches measure it",
								gr_read_s() * 1000.0, sched.plan.load);
				gr_start_batch(now, true);
			}
			else if (gr_pace_holds(now) &&
					 (gr_apply_delay_reached(now) ||
					  gr_unapplied_bytes() >= (uint64) gr_window_size_mb * 1024 * 1024))
				gr_set_note("batch held back by the pace (%s): %d of %d spin cycles left today, one every %.0f s at most; the RTO bound still starts a batch",
							gr_apply_delay_reached(now) ?
							"greenreplica.max_apply_delay passed" :
							"the backlog passed greenreplica.window_size",
							sched.pace.remaining, gr_max_spin_cycles_per_day,
							sched.pace.min_interval_s);
			else if (gr_apply_delay_reached(now))
			{
				gr_set_note("batch started by greenreplica.max_apply_delay: the oldest unapplied WAL is %.1f s old",
							gr_oldest_unapplied_age(now));
				gr_start_batch(now, true);
			}
			break;

		case GR_PHASE_WAKE:
			if (now >= sched.volume_ready_at)
			{
				if (sched.compacting)
					gr_prefetch_and_apply(now);
				else
					gr_start_apply(now, gr_plain_apply_to());
			}
			break;

		case GR_PHASE_APPLY:

			/*
			 * The redo wrapper sets our latch when the stop fires, a moment
			 * before the startup process publishes the replay position.
			 */
			for (int i = 0; i < 50 && GetXLogReplayRecPtr(NULL) < sched.apply_to &&
				 pg_atomic_read_u64(&gr_state->stop_lsn) == InvalidXLogRecPtr; i++)
				pg_usleep(200L);
			if (GetXLogReplayRecPtr(NULL) < sched.apply_to)
				break;
			sched.apply_phase_s += gr_seconds_between(sched.apply_phase_at, now);
			if (sched.compacting && sched.window.split &&
				sched.apply_to < sched.batch_end)
			{
				/* A window split for memory: the next one at once. */
				gr_decode_window();
				gr_prefetch_and_apply(now);
			}
			else
				gr_flush_batch(now);
			break;

		case GR_PHASE_PREFETCH:
		case GR_PHASE_FLUSH:
		case GR_PHASE_PROMOTING:
		case GR_PHASE_COUNT:
			break;
	}
}

/*
 * PostgreSQL's recovery prefetcher, during APPLY, also reads blocks whose
 * first change in the window restores a full-page image (reads redo never
 * needs, which PREFETCH leaves out): 86 reads per MB of WAL in the
 * fresh-window benchmark, where redo needed 6 in all.  The scheduler cannot
 * turn it off for a batch: recovery_prefetch is the startup process's
 * setting (PGC_SIGHUP, no hook), reloaded from the configuration files at
 * every SIGHUP, and overriding it there would leave SHOW and pg_settings
 * saying "on".  So it warns, at start and whenever a reload makes the
 * combination appear.
 */
static void
gr_warn_recovery_prefetch(void)
{
	static bool warned = false;
	bool		wasteful = gr_mode == GR_MODE_COMPACT &&
		recovery_prefetch != RECOVERY_PREFETCH_OFF;

	if (wasteful && !warned)
		ereport(WARNING,
				(errmsg("greenreplica: recovery_prefetch is on on a compacting standby"),
				 errdetail("PREFETCH reads the blocks each window needs; PostgreSQL's recovery prefetcher then also reads blocks that redo rebuilds from full-page images, and greenreplica cannot turn it off for a batch."),
				 errhint("Set recovery_prefetch = off on a standby with greenreplica.mode = compact.")));
	warned = wasteful;
}

void
gr_scheduler_main(Datum main_arg)
{
	MemoryContext tick_context;

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

	CurrentResourceOwner = ResourceOwnerCreate(NULL, "greenreplica scheduler");
	tick_context = AllocSetContextCreate(TopMemoryContext,
										 "greenreplica scheduler tick",
										 ALLOCSET_DEFAULT_SIZES);

	memset(&sched, 0, sizeof(sched));
	sched.phase = GR_PHASE_INACTIVE;
	sched.r_gen = -1;
	sched.cycle_spin_ups = -1;
	sched.r_apl = GR_DEFAULT_R_APL;
	sched.model.read_s = gr_initial_read_time_ms / 1000.0;
	sched.model.replay_rate = GR_DEFAULT_REPLAY_RATE;
	sched.read_s_sorted = -1;
	sched.reads_per_byte = -1;
	sched.write_s = -1;
	sched.restartpoint_redo = GetRedoRecPtr();
	gr_remember_source_settings();
	SpinLockAcquire(&gr_state->mutex);
	sched.operator_resumes_seen = gr_state->operator_resumes;
	SpinLockRelease(&gr_state->mutex);

	/* A pause in effect now is not ours: the operator's, or a target's. */
	if (GetRecoveryPauseState() != RECOVERY_NOT_PAUSED && recoveryTarget == RECOVERY_TARGET_UNSET)
	{
		SpinLockAcquire(&gr_state->mutex);
		if (!gr_state->operator_paused)
		{
			gr_state->operator_paused = true;
			gr_state->operator_paused_at = GetCurrentTimestamp();
		}
		SpinLockRelease(&gr_state->mutex);
	}
	gr_window_init(&sched.window, TopMemoryContext);
	gr_backlog_init(&sched.backlog, TopMemoryContext);

	before_shmem_exit(gr_worker_detach, (Datum) 0);

	SpinLockAcquire(&gr_state->mutex);
	gr_state->worker_pid = MyProcPid;
	gr_state->worker_latch = MyLatch;
	SpinLockRelease(&gr_state->mutex);

	ereport(LOG,
			(errmsg("greenreplica scheduler started in mode \"%s\"",
					gr_mode_name(gr_mode))));

	/*
	 * A background writer that trickles dirty buffers out during
	 * APPLY turns FLUSH's sorted burst into scattered writes.
	 */
	if (gr_mode != GR_MODE_OFF && bgwriter_lru_maxpages > 0)
		ereport(WARNING,
				(errmsg("greenreplica: bgwriter_lru_maxpages is %d on a batching standby",
						bgwriter_lru_maxpages),
				 gr_carry_dirty_buffers ?
				 errdetail("The background writer writes dirty buffers one by one while a batch applies, and would write carried buffers while the volume sleeps: no batch carries its dirty buffers (greenreplica.carry_dirty_buffers) until it is 0.") :
				 errdetail("The background writer writes dirty buffers one by one while a batch applies, instead of leaving them to the batch's sorted write-back."),
				 errhint("Set bgwriter_lru_maxpages = 0 on a standby with greenreplica.mode = defer or compact.")));

	gr_warn_recovery_prefetch();

	for (;;)
	{
		TimestampTz now;
		MemoryContext oldcontext;

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 GR_TICK_MS,
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
			sched.agent_checked_at = 0;
			gr_warn_recovery_prefetch();
		}

		oldcontext = MemoryContextSwitchTo(tick_context);
		now = GetCurrentTimestamp();

		if (!RecoveryInProgress())
			gr_finish(now);

		if (sched.phase != GR_PHASE_PROMOTING && gr_promotion_requested())
			gr_begin_promotion(now);

		if (sched.phase != GR_PHASE_PROMOTING)
		{
			(void) gr_oldest_unapplied_age(now);
			gr_sample_rates(now);
			gr_step(now);
		}
		gr_publish(now);

		MemoryContextSwitchTo(oldcontext);
		MemoryContextReset(tick_context);
	}
}
