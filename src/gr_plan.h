/*-------------------------------------------------------------------------
 *
 * gr_plan.h
 *	  Batch planning from the RTO (Goda & Kitsuregawa), as pure functions.
 *
 * Nothing here knows about PostgreSQL: the planner is plain arithmetic so
 * that it can be unit-tested on its own (test/unit/test_plan.c) and exposed
 * unchanged through greenreplica_plan().
 *
 *-------------------------------------------------------------------------
 */
#ifndef GR_PLAN_H
#define GR_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a plan is not feasible. */
typedef enum GrPlanVerdict
{
	GR_PLAN_OK,
	GR_PLAN_NO_BUDGET,			/* rto - spin_up <= 0 */
	GR_PLAN_APPLY_TOO_SLOW		/* r_apl <= r_gen */
} GrPlanVerdict;

typedef struct GrPlan
{
	double		t_apl;			/* seconds of apply per batch */
	double		t_wnd;			/* seconds between batch starts */
	double		t_sleep;		/* t_wnd - t_apl: planned idle time */
	double		max_unapplied_bytes;	/* backlog at which a batch must start */
	bool		feasible;
	GrPlanVerdict verdict;
} GrPlan;

/*
 * Plan batches for WAL generated at r_gen and applied at r_apl (bytes/s),
 * with rto seconds of which spin_up seconds go to waking the volume, and at
 * most window_size bytes per batch.  The usable budget is rto - spin_up; no
 * safety margin is added here (the caller passes an rto already reduced by
 * its margin).
 */
extern GrPlan gr_plan_batches(double r_gen, double r_apl, double rto,
							  double spin_up, double window_size);

/* Human-readable reason for a verdict, for status and logs. */
extern const char *gr_plan_verdict_message(GrPlanVerdict verdict);

/*
 * Seconds until the volume could take a promotion's writes: waking it
 * (spin_up_remaining) plus applying the backlog at r_apl.
 */
extern double gr_plan_rto_estimate(double unapplied_bytes, double r_apl,
								   double spin_up_remaining);

/*
 * The time model of applying a backlog: replay's cost is
 * dominated by the reads of blocks that are neither restored from a
 * full-page image nor initialized, so bytes per second can be off by two
 * orders of magnitude between a window right after a checkpoint and one in
 * mid-cycle.  The apply time of a backlog is estimated as
 *
 *		reads * read_s + bytes / replay_rate
 *
 * where reads counts the backlog's distinct blocks that need a read.
 */
typedef struct GrApplyModel
{
	double		read_s;			/* seconds per block read, in the order a
								 * promotion reads (LSN order) */
	double		replay_rate;	/* WAL bytes per second of replay's CPU work */
} GrApplyModel;

/* Estimated seconds to apply "reads" block reads and "bytes" of WAL. */
extern double gr_plan_apply_seconds(const GrApplyModel *model, double reads,
									double bytes);

/* What the time model says about the backlog now. */
typedef struct GrTimePlan
{
	double		apply_s;		/* estimated apply time of the backlog */
	double		budget_s;		/* rto - margin - spin-up */
	double		load;			/* apply seconds per second of WAL arrival */
	double		until_due_s;	/* seconds until a batch is due; 0 = now */
	double		max_unapplied_bytes;	/* backlog at which it is due, at
										 * the current cost per byte */
	bool		due;			/* a batch must start now */
	bool		feasible;
	GrPlanVerdict verdict;
} GrTimePlan;

/*
 * Plan by time.  The backlog holds "reads" reads and "bytes" of WAL; WAL
 * arrives at r_gen bytes/s costing cost_per_byte seconds of apply each
 * (the caller's best knowledge: the backlog's own cost per byte when it is
 * large enough, the last window's otherwise).  budget_s = rto - margin -
 * spin_up; lead_s is how long WAL keeps arriving between the decision and
 * the start of the batch's work (the spin-up, a tick).  A batch is due when
 * the backlog's apply time plus what arrives during lead_s reaches the
 * budget, or when the backlog reaches window_size.
 *
 * The plan is infeasible when the budget is not positive, or when applying
 * takes at least as long as generating (load >= 1).  While the model is not
 * measured (measured = false) a load >= 1 does not make the plan infeasible:
 * the batch is due at once instead, small, and measures the model.
 */
extern GrTimePlan gr_plan_by_time(const GrApplyModel *model, double reads,
								  double bytes, double r_gen,
								  double cost_per_byte, double budget_s,
								  double lead_s, double window_size,
								  bool measured);

/*
 * A measurement of the per-read time from a batch that applied "bytes" of
 * WAL with "reads" reads in apply_s seconds: the time left once the CPU
 * work (bytes / replay_rate) is taken out, per read.  With replay_rate <= 0
 * (not measured) all of the time is charged to the reads, which can only
 * overestimate them.  Returns a negative number when the batch had too few
 * reads to say.
 */
extern double gr_plan_read_sample(double apply_s, double reads, double bytes,
								  double replay_rate, double min_reads);

/*
 * Exponentially weighted moving average with time constant tau seconds,
 * for a sample observed over dt seconds.  A negative prev means "no
 * estimate yet": the sample is taken as it is.
 */
extern double gr_plan_smooth(double prev, double sample, double dt, double tau);

/*
 * When the received WAL arrived, coarsely: entry i says that WAL up to lsn[i]
 * had arrived by at[i] (seconds).  It answers "how old is the oldest WAL not
 * yet applied" for greenreplica.max_apply_delay.  When full, neighbouring
 * entries merge into the newer position with the older time, so an age is
 * never underestimated.
 */
#define GR_ARRIVALS_MAX 64

typedef struct GrArrivals
{
	int			count;
	uint64_t	lsn[GR_ARRIVALS_MAX];
	double		at[GR_ARRIVALS_MAX];
} GrArrivals;

/* WAL up to received had arrived by time now; a smaller position is ignored. */
extern void gr_arrivals_note(GrArrivals *arrivals, uint64_t received, double now);

/*
 * Forget what was applied (up to and including "applied") and return when the
 * oldest byte after it arrived, or a negative number when nothing is pending.
 */
extern double gr_arrivals_oldest(GrArrivals *arrivals, uint64_t applied);

/*
 * Carrying dirty buffers across batches.  FLUSH need not write back what a
 * batch dirtied: the buffers can stay dirty in shared buffers until a later
 * batch writes them all in one sorted burst, so the volume wakes for fewer,
 * longer write bursts.  Carrying is safe only while nothing else writes them
 * during SLEEP and while the RTO still holds with their write counted.
 */
typedef enum GrWriteBack
{
	GR_WB_CARRY,				/* carried to the next batch */
	GR_WB_DISABLED,				/* greenreplica.carry_dirty_buffers = off */
	GR_WB_BGWRITER,				/* bgwriter_lru_maxpages > 0 would trickle
								 * them out while the volume sleeps */
	GR_WB_RESTARTPOINT,			/* a restartpoint is due: it writes them */
	GR_WB_DIRTY_SHARE,			/* with the next batch's blocks, the dirty
								 * share of the pool would pass its bound */
	GR_WB_RTO					/* writing them would take too much of the
								 * RTO budget */
} GrWriteBack;

typedef struct GrCarryInput
{
	bool		enabled;		/* greenreplica.carry_dirty_buffers */
	bool		bgwriter_writes;	/* bgwriter_lru_maxpages > 0 */
	bool		restartpoint_due;	/* see gr_plan_restartpoint_due() */
	double		dirty_buffers;	/* dirty now */
	double		next_batch_blocks;	/* what the next batch may dirty */
	double		nbuffers;		/* shared_buffers in buffers */
	double		max_dirty_share;	/* of nbuffers */
	double		write_s;		/* seconds to write one buffer in a sorted
								 * burst, sync included */
	double		budget_s;		/* rto - margin - spin-up */
	double		max_budget_share;	/* of budget_s the carried write may take */
} GrCarryInput;

/* Whether FLUSH writes back (and why), or carries the dirty buffers. */
extern GrWriteBack gr_plan_write_back(const GrCarryInput *in);

/* Human-readable reason, for status and logs. */
extern const char *gr_plan_write_back_message(GrWriteBack verdict);

/* Seconds to write "dirty_buffers" at write_s each: what the RTO charges. */
extern double gr_plan_carried_write_s(double dirty_buffers, double write_s);

/*
 * Whether a restartpoint must be taken at this batch end.  Only a checkpoint
 * record replayed since the last restartpoint allows one; it is then due
 * when the checkpointer would start a timed one before the next batch
 * (since_restartpoint_s + idle_s >= checkpoint_timeout_s: it retries every
 * 15 s once the timeout passed, and would write while the volume sleeps),
 * or when the WAL kept since the last restartpoint reaches half of
 * max_wal_size (the startup process requests one at about that point).
 */
extern bool gr_plan_restartpoint_due(bool checkpoint_replayed,
									 double since_restartpoint_s, double idle_s,
									 double checkpoint_timeout_s,
									 double wal_since_redo, double max_wal_size);

/*
 * Where a window ends: at the end of the last checkpoint record in it
 * ("checkpoint_end", 0 when none), so that the restartpoint falls at the
 * batch end and WAL can be recycled, when that keeps at least min_share of
 * the window's bytes; at "end" otherwise.
 */
extern uint64_t gr_plan_window_end(uint64_t start, uint64_t end,
								   uint64_t checkpoint_end, double min_share);

/*
 * Pacing the day's start/stop budget.  The volume may spin down at most
 * budget times in any 24 hours.  While more than half of the budget is left
 * nothing is paced.  Below that, spin cycles are spaced at least
 * min_interval_s apart: the sustainable pace (a day / budget), or slower,
 * so that the cycles left last until the oldest one of the last 24 hours
 * leaves the window and frees its slot.  Batches are then stretched toward
 * the RTO bound: the window_size cap and the staleness bound no longer
 * start a batch before the pace allows one, the RTO bound always does.
 */
typedef struct GrPace
{
	bool		paced;
	int			remaining;		/* spin cycles left in the last 24 hours */
	double		min_interval_s; /* between spin-downs while paced; 0 if not */
} GrPace;

#define GR_PLAN_DAY_S	86400.0

extern GrPace gr_plan_pace(int budget, int used, double oldest_age_s);

/*
 * Whether the pace allows a batch started by the window cap or the staleness
 * bound, since_sleep_s after the volume last went to sleep (< 0: never).
 */
extern bool gr_plan_pace_allows(const GrPace *pace, double since_sleep_s);

/*
 * Whether a sleep request spends a start/stop cycle of the budget: only when
 * a disk spun up since the last sleep that spent one.  A wake that spun no
 * disk (a write-only wake absorbed by a flash buffer, a hinted wake of pairs
 * that were spinning) leaves nothing to spin down.  The arguments are the
 * agent's count of the volume's spin-ups then and now; a negative one (not
 * known: no cycle spent yet, or an agent without a ledger) spends a cycle.
 */
extern bool gr_plan_sleep_spends_cycle(double spin_ups_at_last_cycle,
									   double spin_ups_now);

/*
 * Runs that respect alignment boundaries (issue 18).  The storage agent cuts
 * every request at its layout's boundaries (chunk ends; member track ends on
 * the track-aligned layouts): a run that crosses one by a few bytes costs a
 * second member request, on the next track or member, for those few bytes.
 * Such a run is cut at the boundary, so that no request of ours crosses it
 * by a sliver, or, for reads, its short side is extended to the whole track
 * when that absorbs the next runs on the same track more cheaply than
 * positioning for each of them.  A write-back run is never extended: the
 * bytes added would be clean pages written again, and a torn write of a
 * clean page has no full-page image in the WAL to repair it.
 *
 * Offsets are bytes on the volume.  Runs are sorted by offset and do not
 * overlap; "key" says which runs may be joined (the same file at the same
 * physical-minus-logical delta): an extension absorbs only runs of its key.
 */
typedef struct GrRun
{
	uint64_t	offset;
	uint64_t	length;
	int64_t		key;
} GrRun;

typedef struct GrAlignParams
{
	uint64_t	slack;			/* a crossing by at most this many bytes is
								 * aligned; 0 disables */
	bool		may_extend;		/* reads only, never write-back */
	double		reposition_s;	/* one more member request: seek and
								 * rotational latency */
	double		byte_s;			/* transfer time of one byte */
} GrAlignParams;

typedef struct GrAlignCounts
{
	uint64_t	crossings_before;	/* boundaries inside a run, as given */
	uint64_t	crossings_after;	/* ... as planned */
	uint64_t	slivers_before; /* crossings by at most slack bytes */
	uint64_t	cut;			/* runs cut at a boundary */
	uint64_t	extended;		/* runs extended to the end of a track */
	uint64_t	absorbed;		/* runs an extension took in */
	uint64_t	extra_bytes;	/* bytes read only because of extensions */
} GrAlignCounts;

/*
 * Align runs[0 .. n) to the sorted boundaries bounds[0 .. nbounds) into out,
 * which must hold 3 * n runs (each run may lose a sliver at both ends);
 * returns the runs written.  With a smaller out, or slack 0, the runs are
 * copied unchanged (as many as fit).  counts may be NULL.
 */
extern size_t gr_plan_align_runs(const GrRun *runs, size_t n,
								 const uint64_t *bounds, size_t nbounds,
								 const GrAlignParams *params,
								 GrRun *out, size_t out_max,
								 GrAlignCounts *counts);

/* Boundaries strictly inside runs[0 .. n): requests the agent will cut. */
extern uint64_t gr_plan_count_crossings(const GrRun *runs, size_t n,
										const uint64_t *bounds, size_t nbounds);

#endif							/* GR_PLAN_H */
