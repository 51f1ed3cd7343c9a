/*
 * Unit tests of the pure batch planner (src/gr_plan.c).
 * Built and run by scripts/check.sh; prints "N passed, M failed".
 */
#include <math.h>
#include <stdio.h>

#include "../../src/gr_plan.h"
#include "unit.h"


static int
near(double got, double want, double rel)
{
	return fabs(got - want) <= rel * fabs(want);
}

int
main(void)
{
	GrPlan		p;

	/* The paper's formulas, uncapped window. */
	p = gr_plan_batches(1e6, 5e7, 100, 0, 1e12);
	expect(p.feasible, "1 MB/s vs 50 MB/s at 100 s is feasible");
	expect(near(p.t_apl, 102.0408, 1e-4), "t_apl = r_apl/(r_apl-r_gen)*rto");
	expect(near(p.t_wnd, 5102.0408, 1e-4), "t_wnd = r_apl^2/((r_apl-r_gen)*r_gen)*rto");
	expect(near(p.max_unapplied_bytes, 5e9, 1e-9), "backlog = r_apl*rto");
	expect(near(p.t_sleep, 5000, 1e-9), "sleep = backlog/r_gen");
	expect(near(p.t_wnd * 1e6, p.t_apl * 5e7, 1e-9),
		   "everything generated in a cycle is applied in it");

	/* Spin-up comes out of the budget. */
	p = gr_plan_batches(1e6, 5e7, 100, 26, 1e12);
	expect(near(p.max_unapplied_bytes, 5e7 * 74, 1e-9), "budget is rto - spin_up");

	/* The window caps the backlog and shortens the cycle. */
	p = gr_plan_batches(1e6, 5e7, 100, 0, 32e6);
	expect(near(p.max_unapplied_bytes, 32e6, 1e-9), "window_size caps the backlog");
	expect(near(p.t_apl, 32e6 / 4.9e7, 1e-9), "t_apl of a capped window");
	expect(near(p.t_wnd, 32e6 * 5e7 / (4.9e7 * 1e6), 1e-9), "t_wnd of a capped window");

	/* Infeasible plans say why. */
	p = gr_plan_batches(5e7, 5e7, 100, 0, 1e12);
	expect(!p.feasible && p.verdict == GR_PLAN_APPLY_TOO_SLOW, "r_apl = r_gen is infeasible");
	p = gr_plan_batches(6e7, 5e7, 100, 0, 1e12);
	expect(!p.feasible && p.verdict == GR_PLAN_APPLY_TOO_SLOW, "r_apl < r_gen is infeasible");
	p = gr_plan_batches(1e6, 5e7, 26, 26, 1e12);
	expect(!p.feasible && p.verdict == GR_PLAN_NO_BUDGET, "rto = spin_up is infeasible");
	p = gr_plan_batches(1e6, 5e7, 30, 40, 1e12);
	expect(!p.feasible && p.verdict == GR_PLAN_NO_BUDGET, "rto < spin_up is infeasible");
	p = gr_plan_batches(1e6, NAN, 100, 0, 1e12);
	expect(!p.feasible, "an unknown apply rate is infeasible");

	/* No WAL at all: feasible, never a forced batch. */
	p = gr_plan_batches(0, 5e7, 100, 0, 1e12);
	expect(p.feasible && isinf(p.t_wnd), "no WAL: infinite interval");

	/* Invariant: a backlog of max_unapplied_bytes applies within the budget. */
	{
		double		rates[][2] = {{1e5, 1e6}, {1e6, 2e6}, {3e6, 1e8}, {9e6, 1e7}};
		int			i;

		for (i = 0; i < 4; i++)
		{
			p = gr_plan_batches(rates[i][0], rates[i][1], 60, 10, 512e6);
			expect(p.feasible &&
				   gr_plan_rto_estimate(p.max_unapplied_bytes, rates[i][1], 10) <= 60 + 1e-9,
				   "the largest backlog is recoverable within the RTO");
		}
	}

	/* RTO estimate. */
	expect(near(gr_plan_rto_estimate(1e8, 1e7, 5), 15, 1e-12), "estimate = spin-up + backlog/r_apl");
	expect(gr_plan_rto_estimate(0, 0, 0) == 0, "nothing pending, awake: zero");
	expect(isinf(gr_plan_rto_estimate(1, 0, 0)), "backlog with no apply rate: unbounded");

	/* Smoothing. */
	expect(gr_plan_smooth(-1, 42, 1, 10) == 42, "first sample is taken as is");
	expect(near(gr_plan_smooth(0, 100, 10, 10), 100 * (1 - exp(-1)), 1e-12), "EWMA weight 1-exp(-dt/tau)");
	expect(gr_plan_smooth(7, 100, 0, 10) == 7, "no time, no change");

	/* Arrival times of received WAL, for greenreplica.max_apply_delay. */
	{
		GrArrivals	a = {0};
		int			i;

		expect(gr_arrivals_oldest(&a, 0) < 0, "nothing received: nothing pending");
		gr_arrivals_note(&a, 100, 10.0);
		gr_arrivals_note(&a, 100, 11.0);
		gr_arrivals_note(&a, 50, 12.0);
		gr_arrivals_note(&a, 200, 13.0);
		expect(a.count == 2, "a position that does not advance adds no entry");
		expect(gr_arrivals_oldest(&a, 0) == 10.0, "the oldest pending WAL arrived at 10");
		expect(gr_arrivals_oldest(&a, 99) == 10.0, "part of the first entry pending");
		expect(gr_arrivals_oldest(&a, 100) == 13.0, "first entry applied: next one");
		expect(a.count == 1, "applied entries are forgotten");
		expect(gr_arrivals_oldest(&a, 200) < 0, "everything applied: nothing pending");

		/* A full ring merges and never makes pending WAL look younger. */
		for (i = 1; i <= 1000; i++)
			gr_arrivals_note(&a, 1000 + (uint64_t) i, (double) i);
		expect(a.count <= GR_ARRIVALS_MAX, "the ring stays bounded");
		{
			GrArrivals	b = a;
			int			ok = 1;

			for (i = 1; i < 1000; i += 7)
			{
				GrArrivals	c = b;

				if (gr_arrivals_oldest(&c, 1000 + (uint64_t) i) > (double) (i + 1))
					ok = 0;
			}
			expect(ok, "after merging, the oldest pending time is never later than the true one");
		}
	}

	return unit_report();
}
