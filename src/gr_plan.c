/*-------------------------------------------------------------------------
 *
 * gr_plan.c
 *	  Batch planning from the RTO (Goda & Kitsuregawa), as pure functions.
 *
 * A batch starts when the unapplied WAL reaches the most that can still be
 * applied within the usable budget (U = r_apl * (rto - spin_up), capped by
 * window_size).  While it applies, WAL keeps arriving at r_gen and the
 * backlog drains at r_apl - r_gen, so
 *
 *		t_apl = U / (r_apl - r_gen)
 *		t_wnd = U * r_apl / ((r_apl - r_gen) * r_gen)
 *
 * which, with U uncapped, are the paper's
 *		t_apl = r_apl / (r_apl - r_gen) * T_RTO
 *		t_wnd = r_apl^2 / ((r_apl - r_gen) * r_gen) * T_RTO.
 * The volume then sleeps t_wnd - t_apl = U / r_gen seconds.
 *
 * That byte-rate plan is kept for greenreplica_plan().  The scheduler plans
 * by time (gr_plan_by_time): the apply time of the backlog is estimated from
 * what it holds, reads * read_s + bytes / replay_rate, and a batch starts
 * when that estimate, plus what arrives while the volume spins up, reaches
 * the budget rto - margin - spin_up.  With load = apply seconds per second
 * of arrival (r_gen * cost per byte), the backlog's estimate grows by load
 * per second during SLEEP and drains by 1 - load per second during APPLY:
 * load < 1 is the time model's r_apl > r_gen.
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>

#include "gr_plan.h"

#define Max0(x) ((x) > 0 ? (x) : 0)

GrPlan
gr_plan_batches(double r_gen, double r_apl, double rto, double spin_up,
				double window_size)
{
	GrPlan		plan = {0};
	double		budget = rto - spin_up;
	double		backlog;

	if (!(budget > 0))
	{
		plan.verdict = GR_PLAN_NO_BUDGET;
		return plan;
	}
	if (!(r_apl > r_gen))
	{
		plan.verdict = GR_PLAN_APPLY_TOO_SLOW;
		return plan;
	}

	backlog = r_apl * budget;
	if (window_size > 0 && backlog > window_size)
		backlog = window_size;

	plan.feasible = true;
	plan.verdict = GR_PLAN_OK;
	plan.max_unapplied_bytes = backlog;
	plan.t_apl = backlog / (r_apl - r_gen);
	if (r_gen > 0)
	{
		plan.t_sleep = backlog / r_gen;
		plan.t_wnd = plan.t_apl + plan.t_sleep;
	}
	else
	{
		/* no WAL arrives: nothing ever forces a batch */
		plan.t_sleep = INFINITY;
		plan.t_wnd = INFINITY;
	}
	return plan;
}

const char *
gr_plan_verdict_message(GrPlanVerdict verdict)
{
	switch (verdict)
	{
		case GR_PLAN_OK:
			return "feasible";
		case GR_PLAN_NO_BUDGET:
			return "the RTO budget does not cover the volume's spin-up time";
		case GR_PLAN_APPLY_TOO_SLOW:
			return "WAL arrives as fast as it can be applied";
	}
	return "unknown";
}

double
gr_plan_rto_estimate(double unapplied_bytes, double r_apl,
					 double spin_up_remaining)
{
	double		apply_s = 0;

	if (unapplied_bytes > 0)
		apply_s = r_apl > 0 ? unapplied_bytes / r_apl : INFINITY;
	return (spin_up_remaining > 0 ? spin_up_remaining : 0) + apply_s;
}

double
gr_plan_apply_seconds(const GrApplyModel *model, double reads, double bytes)
{
	double		s = 0;

	if (reads > 0)
		s += reads * model->read_s;
	if (bytes > 0)
		s += model->replay_rate > 0 ? bytes / model->replay_rate : INFINITY;
	return s;
}

GrTimePlan
gr_plan_by_time(const GrApplyModel *model, double reads, double bytes,
				double r_gen, double cost_per_byte, double budget_s,
				double lead_s, double window_size, bool measured)
{
	GrTimePlan	plan = {0};
	double		until_window = INFINITY;
	double		headroom;

	plan.apply_s = gr_plan_apply_seconds(model, reads, bytes);
	plan.budget_s = budget_s;
	plan.load = (r_gen > 0 && cost_per_byte > 0) ? r_gen * cost_per_byte : 0;
	plan.until_due_s = INFINITY;

	if (!(budget_s > 0))
	{
		plan.verdict = GR_PLAN_NO_BUDGET;
		return plan;
	}
	if (!(plan.load < 1))
	{
		if (measured)
		{
			plan.verdict = GR_PLAN_APPLY_TOO_SLOW;
			return plan;
		}
		/* not measured yet: a small batch now, to measure */
		plan.feasible = true;
		plan.verdict = GR_PLAN_OK;
		plan.due = bytes > 0;
		plan.until_due_s = 0;
		plan.max_unapplied_bytes = bytes;
		return plan;
	}

	plan.feasible = true;
	plan.verdict = GR_PLAN_OK;

	/* what the budget still holds once the lead's arrivals are counted */
	headroom = budget_s - plan.apply_s - plan.load * lead_s;
	if (window_size > 0 && r_gen > 0)
		until_window = (window_size - r_gen * lead_s - bytes) / r_gen;
	else if (window_size > 0 && bytes >= window_size)
		until_window = 0;
	if (plan.load > 0)
		plan.until_due_s = headroom / plan.load;
	else if (!(headroom > 0))
		plan.until_due_s = 0;
	if (until_window < plan.until_due_s)
		plan.until_due_s = until_window;
	if (!(plan.until_due_s > 0))
	{
		plan.until_due_s = 0;
		plan.due = bytes > 0;
	}
	plan.max_unapplied_bytes = isfinite(plan.until_due_s) ?
		bytes + r_gen * plan.until_due_s :
		(window_size > 0 ? window_size : INFINITY);
	return plan;
}

double
gr_plan_read_sample(double apply_s, double reads, double bytes,
					double replay_rate, double min_reads)
{
	double		io_s = apply_s;

	if (!(reads >= min_reads) || !(reads > 0) || !(apply_s > 0))
		return -1;
	if (replay_rate > 0 && bytes > 0)
		io_s -= bytes / replay_rate;
	/* the CPU part cannot explain it all: a read costs at least a little */
	if (io_s < 0.05 * apply_s)
		io_s = 0.05 * apply_s;
	return io_s / reads;
}

double
gr_plan_smooth(double prev, double sample, double dt, double tau)
{
	double		alpha;

	if (prev < 0 || tau <= 0)
		return sample;
	if (dt <= 0)
		return prev;
	alpha = 1.0 - exp(-dt / tau);
	return prev + alpha * (sample - prev);
}

void
gr_arrivals_note(GrArrivals *arrivals, uint64_t received, double now)
{
	int			n = arrivals->count;

	if (n > 0 && received <= arrivals->lsn[n - 1])
		return;
	if (n == GR_ARRIVALS_MAX)
	{
		/* halve: each pair keeps its newer position and its older time */
		for (int i = 0; i < GR_ARRIVALS_MAX / 2; i++)
		{
			arrivals->lsn[i] = arrivals->lsn[2 * i + 1];
			arrivals->at[i] = arrivals->at[2 * i];
		}
		n = GR_ARRIVALS_MAX / 2;
	}
	arrivals->lsn[n] = received;
	arrivals->at[n] = now;
	arrivals->count = n + 1;
}

double
gr_arrivals_oldest(GrArrivals *arrivals, uint64_t applied)
{
	int			first = 0;

	while (first < arrivals->count && arrivals->lsn[first] <= applied)
		first++;
	if (first > 0)
	{
		for (int i = first; i < arrivals->count; i++)
		{
			arrivals->lsn[i - first] = arrivals->lsn[i];
			arrivals->at[i - first] = arrivals->at[i];
		}
		arrivals->count -= first;
	}
	return arrivals->count > 0 ? arrivals->at[0] : -1;
}

GrWriteBack
gr_plan_write_back(const GrCarryInput *in)
{
	if (!in->enabled)
		return GR_WB_DISABLED;
	if (in->bgwriter_writes)
		return GR_WB_BGWRITER;
	if (in->restartpoint_due)
		return GR_WB_RESTARTPOINT;
	/* APPLY must not evict dirty buffers one at a time: room for the next batch */
	if (!(in->nbuffers > 0) ||
		in->dirty_buffers + Max0(in->next_batch_blocks) >
		in->max_dirty_share * in->nbuffers)
		return GR_WB_DIRTY_SHARE;
	if (!(in->budget_s > 0) ||
		gr_plan_carried_write_s(in->dirty_buffers, in->write_s) >
		in->max_budget_share * in->budget_s)
		return GR_WB_RTO;
	return GR_WB_CARRY;
}

const char *
gr_plan_write_back_message(GrWriteBack verdict)
{
	switch (verdict)
	{
		case GR_WB_CARRY:
			return "dirty buffers carried to the next batch";
		case GR_WB_DISABLED:
			return "greenreplica.carry_dirty_buffers is off";
		case GR_WB_BGWRITER:
			return "bgwriter_lru_maxpages is not 0: the background writer would write carried buffers while the volume sleeps";
		case GR_WB_RESTARTPOINT:
			return "a restartpoint is due at this batch end";
		case GR_WB_DIRTY_SHARE:
			return "the dirty buffers and the next batch's blocks would pass the dirty share of shared_buffers";
		case GR_WB_RTO:
			return "writing the carried buffers would take too much of the RTO budget";
	}
	return "unknown";
}

double
gr_plan_carried_write_s(double dirty_buffers, double write_s)
{
	if (!(dirty_buffers > 0))
		return 0;
	return write_s > 0 ? dirty_buffers * write_s : INFINITY;
}

bool
gr_plan_restartpoint_due(bool checkpoint_replayed, double since_restartpoint_s,
						 double idle_s, double checkpoint_timeout_s,
						 double wal_since_redo, double max_wal_size)
{
	if (!checkpoint_replayed)
		return false;
	if (!isfinite(idle_s) || !(since_restartpoint_s >= 0) ||
		since_restartpoint_s + idle_s >= checkpoint_timeout_s)
		return true;
	return wal_since_redo >= 0.5 * max_wal_size;
}

uint64_t
gr_plan_window_end(uint64_t start, uint64_t end, uint64_t checkpoint_end,
				   double min_share)
{
	if (end <= start || checkpoint_end <= start || checkpoint_end >= end)
		return end;
	if ((double) (checkpoint_end - start) < min_share * (double) (end - start))
		return end;
	return checkpoint_end;
}

GrPace
gr_plan_pace(int budget, int used, double oldest_age_s)
{
	GrPace		pace = {0};
	double		until_free;

	pace.remaining = budget > used ? budget - used : 0;
	/* no budget, or none left: the volume keeps spinning, nothing to pace */
	if (budget <= 0 || pace.remaining == 0 || 2 * pace.remaining > budget)
		return pace;

	pace.paced = true;
	pace.min_interval_s = GR_PLAN_DAY_S / budget;
	until_free = oldest_age_s >= 0 && oldest_age_s < GR_PLAN_DAY_S ?
		GR_PLAN_DAY_S - oldest_age_s : GR_PLAN_DAY_S;
	if (until_free / pace.remaining > pace.min_interval_s)
		pace.min_interval_s = until_free / pace.remaining;
	return pace;
}

bool
gr_plan_pace_allows(const GrPace *pace, double since_sleep_s)
{
	if (!pace->paced || since_sleep_s < 0)
		return true;
	return since_sleep_s >= pace->min_interval_s;
}

bool
gr_plan_sleep_spends_cycle(double spin_ups_at_last_cycle, double spin_ups_now)
{
	if (spin_ups_at_last_cycle < 0 || spin_ups_now < 0)
		return true;
	return spin_ups_now > spin_ups_at_last_cycle;
}

/* The first boundary above "at" (index into bounds; nbounds when none). */
static size_t
gr_bound_above(const uint64_t *bounds, size_t nbounds, uint64_t at)
{
	size_t		lo = 0;
	size_t		hi = nbounds;

	while (lo < hi)
	{
		size_t		mid = lo + (hi - lo) / 2;

		if (bounds[mid] <= at)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Boundaries strictly inside [offset, offset + length). */
static uint64_t
gr_run_crossings(const GrRun *run, const uint64_t *bounds, size_t nbounds)
{
	size_t		first = gr_bound_above(bounds, nbounds, run->offset);
	size_t		end = gr_bound_above(bounds, nbounds, run->offset + run->length - 1);

	return run->length == 0 ? 0 : (uint64_t) (end - first);
}

uint64_t
gr_plan_count_crossings(const GrRun *runs, size_t n, const uint64_t *bounds,
						size_t nbounds)
{
	uint64_t	crossings = 0;

	for (size_t i = 0; i < n; i++)
		crossings += gr_run_crossings(&runs[i], bounds, nbounds);
	return crossings;
}

static void
gr_emit_run(GrRun *out, size_t *nout, uint64_t from, uint64_t to, int64_t key)
{
	out[*nout].offset = from;
	out[*nout].length = to - from;
	out[*nout].key = key;
	(*nout)++;
}

size_t
gr_plan_align_runs(const GrRun *runs, size_t n, const uint64_t *bounds, size_t nbounds,
				   const GrAlignParams *params, GrRun *out, size_t out_max,
				   GrAlignCounts *counts)
{
	GrAlignCounts c = {0};
	size_t		nout = 0;
	size_t		i = 0;

	c.crossings_before = gr_plan_count_crossings(runs, n, bounds, nbounds);
	if (params->slack == 0 || nbounds == 0 || out_max / 3 < n)
	{
		for (; nout < n && nout < out_max; nout++)
			out[nout] = runs[nout];
		c.crossings_after = gr_plan_count_crossings(out, nout, bounds, nbounds);
		if (counts)
			*counts = c;
		return nout;
	}

	while (i < n)
	{
		uint64_t	s = runs[i].offset;
		uint64_t	e = s + runs[i].length;
		int64_t		key = runs[i].key;
		size_t		b;

		if (e <= s)
		{
			i++;
			continue;
		}

		/* A sliver before the first boundary inside: cut it off. */
		b = gr_bound_above(bounds, nbounds, s);
		if (b < nbounds && bounds[b] < e && bounds[b] - s <= params->slack)
		{
			c.slivers_before++;
			gr_emit_run(out, &nout, s, bounds[b], key);
			c.cut++;
			s = bounds[b];
		}

		/* A sliver past the last boundary inside: cut it off, or extend it. */
		b = gr_bound_above(bounds, nbounds, e - 1);
		if (b > 0 && bounds[b - 1] > s && e - bounds[b - 1] <= params->slack)
		{
			uint64_t	last = bounds[b - 1];
			uint64_t	track_end = b < nbounds ? bounds[b] : e;
			uint64_t	stop = track_end;
			double		cut_s = params->reposition_s + (double) (e - last) * params->byte_s;
			uint64_t	needed = e - last;
			size_t		k = i + 1;

			c.slivers_before++;
			gr_emit_run(out, &nout, s, last, key);

			/* The runs of this key that lie wholly on the sliver's track. */
			while (k < n && runs[k].key == key &&
				   runs[k].offset + runs[k].length <= track_end)
			{
				cut_s += params->reposition_s + (double) runs[k].length * params->byte_s;
				needed += runs[k].length;
				k++;
			}
			if (k < n && runs[k].offset < stop)
				stop = runs[k].offset;

			if (params->may_extend && k > i + 1 &&
				params->reposition_s + (double) (stop - last) * params->byte_s < cut_s)
			{
				gr_emit_run(out, &nout, last, stop, key);
				c.extended++;
				c.absorbed += k - (i + 1);
				c.extra_bytes += (stop - last) - needed;
				i = k;
				continue;
			}
			gr_emit_run(out, &nout, last, e, key);
			c.cut++;
			i++;
			continue;
		}

		gr_emit_run(out, &nout, s, e, key);
		i++;
	}
	c.crossings_after = gr_plan_count_crossings(out, nout, bounds, nbounds);
	if (counts)
		*counts = c;
	return nout;
}
