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

/* Runs aligned to boundaries (issue 18): one case per rule. */
static void
test_align_runs(void)
{
	/* Tracks of 1000 bytes: boundaries at 1000, 2000, ... 9000. */
	uint64_t	bounds[9];
	GrRun		out[16];
	GrAlignCounts c;
	GrAlignParams read = {.slack = 64, .may_extend = true,
	.reposition_s = 0.004, .byte_s = 1e-6};
	GrAlignParams write = read;
	size_t		n;

	write.may_extend = false;
	for (int i = 0; i < 9; i++)
		bounds[i] = (uint64_t) (i + 1) * 1000;

	/* A run crossing by a sliver at its end is cut at the boundary. */
	{
		GrRun		in[] = {{100, 932, 0}};	/* 100 .. 1032 */

		n = gr_plan_align_runs(in, 1, bounds, 9, &write, out, 16, &c);
		expect(n == 2 && out[0].offset == 100 && out[0].length == 900 &&
			   out[1].offset == 1000 && out[1].length == 32,
			   "a sliver past a boundary is cut off at it");
		expect(c.cut == 1 && c.slivers_before == 1 && c.crossings_before == 1 &&
			   c.crossings_after == 0, "the cut is counted and no crossing is left");
	}

	/* A sliver before the boundary at the start is cut as well. */
	{
		GrRun		in[] = {{1980, 520, 0}};	/* 1980 .. 2500 */

		n = gr_plan_align_runs(in, 1, bounds, 9, &read, out, 16, &c);
		expect(n == 2 && out[0].offset == 1980 && out[0].length == 20 &&
			   out[1].offset == 2000 && out[1].length == 500,
			   "a sliver before a boundary is cut off at it");
	}

	/* A crossing by more than the slack is the agent's to cut: left alone. */
	{
		GrRun		in[] = {{500, 1000, 0}};	/* 500 .. 1500 */

		n = gr_plan_align_runs(in, 1, bounds, 9, &read, out, 16, &c);
		expect(n == 1 && out[0].offset == 500 && out[0].length == 1000 &&
			   c.cut == 0 && c.crossings_after == 1,
			   "a long crossing is left as it is");
	}

	/*
	 * Reads: the sliver's track holds three more small runs; reading the
	 * rest of the track (1 ms of transfer) beats three positionings (12 ms).
	 */
	{
		GrRun		in[] = {{100, 910, 0}, {1200, 10, 0}, {1500, 10, 0}, {1800, 10, 0}, {2500, 10, 0}};

		n = gr_plan_align_runs(in, 5, bounds, 9, &read, out, 16, &c);
		expect(n == 3 && out[0].offset == 100 && out[0].length == 900 &&
			   out[1].offset == 1000 && out[1].length == 1000 &&
			   out[2].offset == 2500,
			   "a read's sliver is extended to its track, taking in the runs on it");
		expect(c.extended == 1 && c.absorbed == 3 && c.extra_bytes == 1000 - 10 - 30,
			   "the extension and what it took in are counted");
	}

	/* Write-back: the same runs are only cut, never extended over clean pages. */
	{
		GrRun		in[] = {{100, 910, 0}, {1200, 10, 0}, {1500, 10, 0}, {1800, 10, 0}, {2500, 10, 0}};

		n = gr_plan_align_runs(in, 5, bounds, 9, &write, out, 16, &c);
		expect(n == 6 && out[1].offset == 1000 && out[1].length == 10 &&
			   out[2].offset == 1200 && c.extended == 0 && c.extra_bytes == 0,
			   "a write-back run is cut, never extended");
	}

	/* Extension does not pay when the track holds nothing else. */
	{
		GrRun		in[] = {{100, 910, 0}, {2500, 10, 0}};

		n = gr_plan_align_runs(in, 2, bounds, 9, &read, out, 16, &c);
		expect(n == 3 && out[1].offset == 1000 && out[1].length == 10 && c.extended == 0,
			   "a lone sliver is cut, not extended");
	}

	/* An extension takes in only runs of its key and stops before the others. */
	{
		GrRun		in[] = {{100, 910, 7}, {1200, 10, 7}, {1500, 10, 8}, {1800, 10, 7}};

		n = gr_plan_align_runs(in, 4, bounds, 9, &read, out, 16, &c);
		expect(c.absorbed <= 1 && out[n - 1].offset == 1800 &&
			   out[1].offset + out[1].length <= 1500,
			   "an extension never takes in another file's run");
	}

	/* Slack 0 or too small an out: unchanged. */
	{
		GrRun		in[] = {{100, 932, 0}};
		GrAlignParams off = read;

		off.slack = 0;
		n = gr_plan_align_runs(in, 1, bounds, 9, &off, out, 16, &c);
		expect(n == 1 && out[0].length == 932, "slack 0 leaves the runs alone");
		n = gr_plan_align_runs(in, 1, bounds, 9, &read, out, 2, &c);
		expect(n == 1 && out[0].length == 932, "too small an out leaves them alone");
		n = gr_plan_align_runs(in, 1, NULL, 0, &read, out, 16, &c);
		expect(n == 1 && out[0].length == 932, "no boundaries: unchanged");
	}

	/* Crossings are counted per boundary inside a run. */
	{
		GrRun		in[] = {{500, 2000, 0}, {3000, 1000, 0}, {4100, 50, 0}};

		expect(gr_plan_count_crossings(in, 3, bounds, 9) == 2,
			   "boundaries strictly inside runs are crossings");
	}
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

	/* The time model: reads * read_s + bytes / replay_rate. */
	{
		GrApplyModel m = {0.020, 16e6};
		GrTimePlan	t;
		GrTimePlan	fpi;
		GrTimePlan	upd;

		expect(near(gr_plan_apply_seconds(&m, 1000, 16e6), 21, 1e-12),
			   "1000 reads at 20 ms plus 16 MB at 16 MB/s is 21 s");
		expect(gr_plan_apply_seconds(&m, 0, 0) == 0, "an empty backlog costs nothing");

		/*
		 * An FPI-heavy window (a read per 100 kB: right after a checkpoint)
		 * may grow much larger than an update-heavy one (a read per 200
		 * bytes) before its batch is due, at the same RTO budget of 20 s.
		 */
		fpi = gr_plan_by_time(&m, 100, 10e6, 1e6, (1 / 100e3) * 0.020 + 1 / 16e6,
							  20, 0, 0, true);
		upd = gr_plan_by_time(&m, 5000, 1e6, 1e6, (1 / 200.0) * 0.020 + 1 / 16e6,
							  20, 0, 0, true);
		expect(fpi.feasible && !fpi.due, "10 MB of page images, 100 reads: not due");
		expect(!upd.feasible && upd.verdict == GR_PLAN_APPLY_TOO_SLOW,
			   "5000 reads per MB arriving at 1 MB/s cannot be applied in time");
		upd = gr_plan_by_time(&m, 500, 100e3, 5e3, (1 / 200.0) * 0.020 + 1 / 16e6,
							  20, 0, 0, true);
		expect(upd.feasible && !upd.due && upd.load < 1, "500 reads (10 s) of updates: not due yet");
		expect(near(upd.max_unapplied_bytes, 100e3 + 5e3 * upd.until_due_s, 1e-9),
			   "the byte equivalent is the backlog plus what arrives until due");
		expect(fpi.max_unapplied_bytes > 50 * upd.max_unapplied_bytes,
			   "the FPI-heavy window is allowed to grow far larger than the update-heavy one");
		t = gr_plan_by_time(&m, 1000, 200e3, 5e3, (1 / 200.0) * 0.020 + 1 / 16e6,
							20, 0, 0, true);
		expect(t.feasible && t.due && t.until_due_s == 0, "1000 reads (20 s) of updates: due");

		/* What arrives during the spin-up counts: due earlier. */
		t = gr_plan_by_time(&m, 800, 160e3, 5e3, (1 / 200.0) * 0.020 + 1 / 16e6,
							20, 26, 0, true);
		expect(t.due, "16 s of reads plus 26 s of arrivals at load 0.5 is due at a 20 s budget");

		/* window_size caps a window whatever its cost. */
		t = gr_plan_by_time(&m, 0, 64e6, 1e6, 1 / 16e6, 60, 0, 64e6, true);
		expect(t.due, "a backlog of window_size is due");
		t = gr_plan_by_time(&m, 0, 10e6, 1e6, 1 / 16e6, 60, 0, 64e6, true);
		expect(near(t.until_due_s, 54, 1e-9), "due when window_size is reached");

		/* The budget must cover the spin-up. */
		t = gr_plan_by_time(&m, 0, 1e6, 1e3, 1e-7, 0, 26, 0, true);
		expect(!t.feasible && t.verdict == GR_PLAN_NO_BUDGET, "no budget: infeasible");

		/*
		 * Pessimistic start: while the model is not measured, a load >= 1 is
		 * not declared infeasible; the batch starts at once, small, and
		 * measures.
		 */
		t = gr_plan_by_time(&m, 50, 10e3, 1e6, (1 / 200.0) * 0.020, 20, 26, 0, false);
		expect(t.feasible && t.due, "unmeasured and too slow by the pessimistic start: a batch now");
		t = gr_plan_by_time(&m, 50, 10e3, 1e6, (1 / 200.0) * 0.020, 20, 26, 0, true);
		expect(!t.feasible && t.verdict == GR_PLAN_APPLY_TOO_SLOW,
			   "measured and too slow: infeasible, not silently batched");

		/* Invariant: when not due, a promotion now fits the budget. */
		{
			double		reads[] = {0, 10, 100, 500, 900};
			int			ok = 1;

			for (int i = 0; i < 5; i++)
			{
				t = gr_plan_by_time(&m, reads[i], 100e3, 5e3,
									(1 / 300.0) * 0.020 + 1 / 16e6, 20, 5, 0, true);
				if (!t.due && t.apply_s + t.load * 5 > 20 + 1e-9)
					ok = 0;
			}
			expect(ok, "a backlog not yet due applies within the budget");
		}
	}

	/* Measuring the per-read time from a batch. */
	expect(near(gr_plan_read_sample(11, 500, 16e6, 16e6, 32), 0.020, 1e-12),
		   "11 s for 500 reads and 16 MB at 16 MB/s: 20 ms per read");
	expect(near(gr_plan_read_sample(11, 500, 16e6, 0, 32), 0.022, 1e-12),
		   "CPU rate unknown: all of the time is charged to the reads");
	expect(gr_plan_read_sample(11, 10, 16e6, 16e6, 32) < 0, "too few reads to say");
	expect(gr_plan_read_sample(1, 100, 32e6, 16e6, 32) > 0,
		   "a read is never free even when the CPU rate explains it all");

	/* Carrying dirty buffers across batches. */
	{
		GrCarryInput in = {
			.enabled = true,.bgwriter_writes = false,.restartpoint_due = false,
			.dirty_buffers = 1000,.next_batch_blocks = 2000,.nbuffers = 16384,
			.max_dirty_share = 0.5,.write_s = 0.001,.budget_s = 80,
			.max_budget_share = 0.25
		};
		GrCarryInput c;

		expect(gr_plan_write_back(&in) == GR_WB_CARRY,
			   "3000 of 16384 buffers, 1 s of writes in an 80 s budget: carried");
		c = in;
		c.enabled = false;
		expect(gr_plan_write_back(&c) == GR_WB_DISABLED, "off: written back");
		c = in;
		c.bgwriter_writes = true;
		expect(gr_plan_write_back(&c) == GR_WB_BGWRITER,
			   "a background writer that writes: never carried");
		c = in;
		c.restartpoint_due = true;
		expect(gr_plan_write_back(&c) == GR_WB_RESTARTPOINT,
			   "a restartpoint due writes them anyway");
		c = in;
		c.next_batch_blocks = 7193;
		expect(gr_plan_write_back(&c) == GR_WB_DIRTY_SHARE,
			   "dirty + next batch over half the pool: written back");
		c.next_batch_blocks = 7192;
		expect(gr_plan_write_back(&c) == GR_WB_CARRY, "exactly half the pool: carried");
		c = in;
		c.nbuffers = 0;
		expect(gr_plan_write_back(&c) == GR_WB_DIRTY_SHARE, "no pool size: written back");
		c = in;
		c.write_s = 0.021;
		expect(gr_plan_write_back(&c) == GR_WB_RTO,
			   "21 s of writes over a quarter of an 80 s budget: written back");
		c.write_s = 0;
		expect(gr_plan_write_back(&c) == GR_WB_RTO, "unknown write time: written back");
		c = in;
		c.budget_s = 0;
		expect(gr_plan_write_back(&c) == GR_WB_RTO, "no budget: written back");
		expect(gr_plan_carried_write_s(0, 0) == 0, "nothing carried costs nothing");
		expect(near(gr_plan_carried_write_s(1000, 0.002), 2, 1e-12), "1000 x 2 ms = 2 s");
		expect(isinf(gr_plan_carried_write_s(1, 0)), "unknown write time is infinite");
		for (int v = GR_WB_CARRY; v <= GR_WB_RTO; v++)
			expect(gr_plan_write_back_message((GrWriteBack) v)[0] != 'u', "every verdict has a message");
	}

	/* Restartpoints at batch ends. */
	expect(!gr_plan_restartpoint_due(false, 1e6, 1e6, 300, 1e12, 1e9),
		   "no checkpoint record replayed: never due");
	expect(gr_plan_restartpoint_due(true, 200, 100, 300, 0, 1e9),
		   "the checkpointer's timed one would fall in the sleep: due");
	expect(!gr_plan_restartpoint_due(true, 200, 99, 300, 0, 1e9),
		   "the next batch comes before the timeout: not due");
	expect(gr_plan_restartpoint_due(true, 0, INFINITY, 86400, 0, 1e9),
		   "an unbounded sleep: due");
	expect(gr_plan_restartpoint_due(true, -1, 10, 86400, 0, 1e9),
		   "last restartpoint unknown: due");
	expect(gr_plan_restartpoint_due(true, 0, 10, 86400, 5e8, 1e9),
		   "half of max_wal_size kept: due");
	expect(!gr_plan_restartpoint_due(true, 0, 10, 86400, 4.9e8, 1e9),
		   "less than half of max_wal_size: not due");

	/* Windows end on checkpoint records. */
	expect(gr_plan_window_end(1000, 2000, 1800, 0.5) == 1800,
		   "a checkpoint record at 80 % of the window ends it");
	expect(gr_plan_window_end(1000, 2000, 1500, 0.5) == 1500, "at exactly half: ends it");
	expect(gr_plan_window_end(1000, 2000, 1499, 0.5) == 2000,
		   "before half: the window keeps its end");
	expect(gr_plan_window_end(1000, 2000, 0, 0.5) == 2000, "no checkpoint record");
	expect(gr_plan_window_end(1000, 2000, 900, 0.5) == 2000, "a checkpoint before the window");
	expect(gr_plan_window_end(1000, 2000, 2000, 0.5) == 2000, "one at the end is the end");
	expect(gr_plan_window_end(1000, 2000, 2500, 0.5) == 2000, "one past the end is ignored");
	expect(gr_plan_window_end(1000, 1000, 1000, 0.5) == 1000, "an empty window");

	/* Pacing the start/stop budget. */
	{
		GrPace		pace;

		pace = gr_plan_pace(24, 11, 3600);
		expect(!pace.paced && pace.remaining == 13, "13 of 24 left: not paced");
		expect(gr_plan_pace_allows(&pace, 0), "unpaced: a batch may start at once");
		pace = gr_plan_pace(24, 12, 80000);
		expect(pace.paced && pace.remaining == 12, "12 of 24 left: paced");
		expect(near(pace.min_interval_s, 3600, 1e-12),
			   "a slot frees soon: the sustainable pace, a day / 24");
		pace = gr_plan_pace(24, 20, 3600);
		expect(near(pace.min_interval_s, (86400.0 - 3600) / 4, 1e-12),
			   "4 left, the oldest frees in 23 h: one every 5.75 h");
		expect(!gr_plan_pace_allows(&pace, 20000), "paced: not before the interval");
		expect(gr_plan_pace_allows(&pace, 20700), "paced: at the interval");
		expect(gr_plan_pace_allows(&pace, -1), "never slept: allowed");
		pace = gr_plan_pace(24, 24, 3600);
		expect(!pace.paced && pace.remaining == 0,
			   "none left: the volume keeps spinning, nothing to pace");
		pace = gr_plan_pace(0, 0, -1);
		expect(!pace.paced, "no budget: nothing to pace");
		pace = gr_plan_pace(2, 1, -1);
		expect(pace.paced && near(pace.min_interval_s, 86400, 1e-12),
			   "1 of 2 left, oldest unknown: a day");
	}

	/* A sleep spends a start/stop cycle only if a disk spun up since the last. */
	expect(gr_plan_sleep_spends_cycle(-1, 0), "the first sleep spends a cycle");
	expect(gr_plan_sleep_spends_cycle(4, -1), "spin-ups unknown: spends one");
	expect(!gr_plan_sleep_spends_cycle(4, 4),
		   "no disk spun up since (a write-only wake): no cycle spent");
	expect(gr_plan_sleep_spends_cycle(4, 5), "a disk spun up since: a cycle");
	expect(gr_plan_sleep_spends_cycle(4, 12), "a whole volume spun up: one cycle");

	test_align_runs();
	return unit_report();
}
