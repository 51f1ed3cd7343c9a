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

#endif							/* GR_PLAN_H */
