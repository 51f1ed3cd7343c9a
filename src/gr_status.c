/*-------------------------------------------------------------------------
 *
 * gr_status.c
 *	  SQL API: greenreplica_status(), greenreplica_plan() and
 *	  greenreplica_batch_now().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "greenreplica.h"
#include "gr_plan.h"

PG_FUNCTION_INFO_V1(greenreplica_status);
PG_FUNCTION_INFO_V1(greenreplica_plan);
PG_FUNCTION_INFO_V1(greenreplica_batch_now);

/* Columns of greenreplica_status(), in order. */
enum
{
	GR_STATUS_ROLE,
	GR_STATUS_MODE,
	GR_STATUS_PHASE,
	GR_STATUS_WORKER_PID,
	GR_STATUS_NOTE,
	GR_STATUS_UNAPPLIED_BYTES,
	GR_STATUS_MAX_UNAPPLIED_BYTES,
	GR_STATUS_R_GEN,
	GR_STATUS_R_APL,
	GR_STATUS_R_APL_MEASURED,
	GR_STATUS_FEASIBLE,
	GR_STATUS_RTO_BUDGET_S,
	GR_STATUS_RTO_ESTIMATE_S,
	GR_STATUS_NEXT_BATCH_AT,
	GR_STATUS_BATCHES,
	GR_STATUS_LAST_BATCH_START,
	GR_STATUS_LAST_BATCH_DURATION_S,
	GR_STATUS_LAST_BATCH_BYTES,
	GR_STATUS_LAST_BATCH_RECORDS,
	GR_STATUS_LAST_BATCH_BUFFERS_FLUSHED,
	GR_STATUS_LAST_BATCH_WINDOWS,
	GR_STATUS_LAST_BATCH_DECODED_RECORDS,
	GR_STATUS_LAST_BATCH_BLOCK_REFS,
	GR_STATUS_LAST_BATCH_DISTINCT_BLOCKS,
	GR_STATUS_LAST_BATCH_READS_NEEDED,
	GR_STATUS_LAST_BATCH_READS_AVOIDED,
	GR_STATUS_LAST_BATCH_FOLD_RATIO,
	GR_STATUS_LAST_BATCH_PREFETCH_IOS,
	GR_STATUS_LAST_BATCH_PREFETCH_BYTES,
	GR_STATUS_LAST_BATCH_SEQUENTIAL_SHARE,
	GR_STATUS_LAST_BATCH_DECODE_SECONDS,
	GR_STATUS_LAST_BATCH_BYTES_PER_BLOCK,
	GR_STATUS_LAST_BATCH_HINT_EXTENTS,
	GR_STATUS_TOTAL_BLOCK_REFS,
	GR_STATUS_TOTAL_DISTINCT_BLOCKS,
	GR_STATUS_TOTAL_READS_AVOIDED,
	GR_STATUS_TOTAL_PREFETCH_IOS,
	GR_STATUS_TOTAL_PREFETCH_BYTES,
	GR_STATUS_WINDOW_SPLITS,
	GR_STATUS_PREFETCHES_ABORTED,
	GR_STATUS_SPIN_CYCLES_TODAY,
	GR_STATUS_AGENT,
	GR_STATUS_AGENT_MESSAGE,
	GR_STATUS_VOLUME_STATE,
	GR_STATUS_SPIN_UP_S,
	GR_STATUS_BREAK_EVEN_S,
	GR_STATUS_LAST_PROMOTION_S,
	GR_STATUS_STEP,
	GR_STATUS_STEP_STARTED_AT,
	GR_STATUS_VOLUME_STATE_AT,
	GR_STATUS_OLDEST_UNAPPLIED_AGE_S,
	GR_STATUS_OPERATOR_PAUSED,
	GR_STATUS_WAL_RECEIVER,
	GR_STATUS_SLEEP_VOLUME_IOS,
	GR_STATUS_SLEEP_VOLUME_SPIN_UPS,
	GR_STATUS_UNAPPLIED_READS,
	GR_STATUS_READ_TIME_MS,
	GR_STATUS_READ_TIME_MEASURED,
	GR_STATUS_REPLAY_RATE,
	GR_STATUS_STEP_DONE,
	GR_STATUS_STEP_TOTAL,
	GR_STATUS_LAST_BATCH_WAKE_S,
	GR_STATUS_LAST_BATCH_PREFETCH_S,
	GR_STATUS_LAST_BATCH_APPLY_S,
	GR_STATUS_LAST_BATCH_FLUSH_S,
	GR_STATUS_LAST_BATCH_GAP_BLOCKS,
	GR_STATUS_CARRIED_DIRTY_BUFFERS,
	GR_STATUS_CARRIED_WRITE_S,
	GR_STATUS_WRITE_BACK,
	GR_STATUS_LAST_BATCH_ENDED_AT_CHECKPOINT,
	GR_STATUS_RESTARTPOINTS,
	GR_STATUS_SPIN_CYCLE_BUDGET,
	GR_STATUS_PACED,
	GR_STATUS_PACE_INTERVAL_S,
	GR_STATUS_LAST_BATCH_BLOCKS_CACHED,
	GR_STATUS_WRITE_ONLY_BATCHES,
	GR_STATUS_NCOLS
};

static void
gr_check_columns(TupleDesc tupdesc, int expected, const char *function)
{
	if (tupdesc->natts != expected)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s returns %d columns, the library expects %d",
						function, tupdesc->natts, expected),
				 errhint("Run ALTER EXTENSION greenreplica UPDATE on the primary.")));
}

Datum
greenreplica_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[GR_STATUS_NCOLS];
	bool		nulls[GR_STATUS_NCOLS];
	GrSharedState s;
	bool		running;

	gr_require_preload("greenreplica_status()");
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	gr_check_columns(tupdesc, GR_STATUS_NCOLS, "greenreplica_status()");

	/* A consistent snapshot; the atomics are not looked at. */
	SpinLockAcquire(&gr_state->mutex);
	memcpy(&s, gr_state, sizeof(s));
	SpinLockRelease(&gr_state->mutex);
	running = s.worker_pid != 0;

	memset(nulls, 0, sizeof(nulls));
	values[GR_STATUS_ROLE] =
		CStringGetTextDatum(RecoveryInProgress() ? "standby" : "primary");
	values[GR_STATUS_MODE] = CStringGetTextDatum(gr_mode_name(gr_mode));
	values[GR_STATUS_PHASE] = CStringGetTextDatum(gr_phase_name(s.phase));
	values[GR_STATUS_WORKER_PID] = Int32GetDatum(s.worker_pid);
	nulls[GR_STATUS_WORKER_PID] = !running;
	values[GR_STATUS_NOTE] = CStringGetTextDatum(s.note);
	nulls[GR_STATUS_NOTE] = !running || s.note[0] == '\0';

	values[GR_STATUS_UNAPPLIED_BYTES] = Int64GetDatum((int64) s.unapplied_bytes);
	values[GR_STATUS_MAX_UNAPPLIED_BYTES] = Int64GetDatum((int64) s.max_unapplied_bytes);
	values[GR_STATUS_R_GEN] = Float8GetDatum(s.r_gen);
	values[GR_STATUS_R_APL] = Float8GetDatum(s.r_apl);
	values[GR_STATUS_R_APL_MEASURED] = BoolGetDatum(s.r_apl_measured);
	values[GR_STATUS_FEASIBLE] = BoolGetDatum(s.feasible);
	values[GR_STATUS_RTO_BUDGET_S] = Float8GetDatum(s.rto_budget_s);
	values[GR_STATUS_RTO_ESTIMATE_S] = Float8GetDatum(s.rto_estimate_s);
	values[GR_STATUS_NEXT_BATCH_AT] = TimestampTzGetDatum(s.next_batch_at);
	values[GR_STATUS_BATCHES] = Int64GetDatum((int64) s.batches);
	values[GR_STATUS_LAST_BATCH_START] = TimestampTzGetDatum(s.last_batch_start);
	values[GR_STATUS_LAST_BATCH_DURATION_S] = Float8GetDatum(s.last_batch_duration_s);
	values[GR_STATUS_LAST_BATCH_BYTES] = Int64GetDatum((int64) s.last_batch_bytes);
	values[GR_STATUS_LAST_BATCH_RECORDS] = Int64GetDatum((int64) s.last_batch_records);
	values[GR_STATUS_LAST_BATCH_BUFFERS_FLUSHED] =
		Int64GetDatum((int64) s.last_batch_buffers_flushed);
	values[GR_STATUS_LAST_BATCH_WINDOWS] = Int64GetDatum((int64) s.last_batch_windows);
	values[GR_STATUS_LAST_BATCH_DECODED_RECORDS] = Int64GetDatum((int64) s.last_batch_decoded_records);
	values[GR_STATUS_LAST_BATCH_BLOCK_REFS] = Int64GetDatum((int64) s.last_batch_block_refs);
	values[GR_STATUS_LAST_BATCH_DISTINCT_BLOCKS] = Int64GetDatum((int64) s.last_batch_distinct_blocks);
	values[GR_STATUS_LAST_BATCH_READS_NEEDED] = Int64GetDatum((int64) s.last_batch_reads_needed);
	values[GR_STATUS_LAST_BATCH_READS_AVOIDED] = Int64GetDatum((int64) s.last_batch_reads_avoided);
	values[GR_STATUS_LAST_BATCH_FOLD_RATIO] = Float8GetDatum(s.last_batch_fold_ratio);
	values[GR_STATUS_LAST_BATCH_PREFETCH_IOS] = Int64GetDatum((int64) s.last_batch_prefetch_ios);
	values[GR_STATUS_LAST_BATCH_PREFETCH_BYTES] = Int64GetDatum((int64) s.last_batch_prefetch_bytes);
	values[GR_STATUS_LAST_BATCH_SEQUENTIAL_SHARE] = Float8GetDatum(s.last_batch_sequential_share);
	values[GR_STATUS_LAST_BATCH_DECODE_SECONDS] = Float8GetDatum(s.last_batch_decode_seconds);
	values[GR_STATUS_LAST_BATCH_BYTES_PER_BLOCK] = Float8GetDatum(s.last_batch_bytes_per_block);
	values[GR_STATUS_LAST_BATCH_HINT_EXTENTS] = Int64GetDatum((int64) s.last_batch_hint_extents);
	values[GR_STATUS_TOTAL_BLOCK_REFS] = Int64GetDatum((int64) s.total_block_refs);
	values[GR_STATUS_TOTAL_DISTINCT_BLOCKS] = Int64GetDatum((int64) s.total_distinct_blocks);
	values[GR_STATUS_TOTAL_READS_AVOIDED] = Int64GetDatum((int64) s.total_reads_avoided);
	values[GR_STATUS_TOTAL_PREFETCH_IOS] = Int64GetDatum((int64) s.total_prefetch_ios);
	values[GR_STATUS_TOTAL_PREFETCH_BYTES] = Int64GetDatum((int64) s.total_prefetch_bytes);
	values[GR_STATUS_WINDOW_SPLITS] = Int64GetDatum((int64) s.window_splits);
	values[GR_STATUS_PREFETCHES_ABORTED] = Int64GetDatum((int64) s.prefetches_aborted);
	values[GR_STATUS_SPIN_CYCLES_TODAY] = Int32GetDatum(s.spin_cycles_today);
	values[GR_STATUS_AGENT] = CStringGetTextDatum(gr_agent_state_name(s.agent_state));
	values[GR_STATUS_AGENT_MESSAGE] = CStringGetTextDatum(s.agent_message);
	values[GR_STATUS_VOLUME_STATE] = CStringGetTextDatum(s.volume_state);
	values[GR_STATUS_SPIN_UP_S] = Float8GetDatum(s.spin_up_s);
	values[GR_STATUS_BREAK_EVEN_S] = Float8GetDatum(s.break_even_s);
	values[GR_STATUS_LAST_PROMOTION_S] = Float8GetDatum(s.last_promotion_s);
	values[GR_STATUS_STEP] = CStringGetTextDatum(s.step);
	values[GR_STATUS_STEP_STARTED_AT] = TimestampTzGetDatum(s.step_started_at);
	values[GR_STATUS_VOLUME_STATE_AT] = TimestampTzGetDatum(s.volume_state_at);
	values[GR_STATUS_OLDEST_UNAPPLIED_AGE_S] = Float8GetDatum(s.oldest_unapplied_age_s);
	values[GR_STATUS_OPERATOR_PAUSED] = BoolGetDatum(s.operator_paused);
	values[GR_STATUS_WAL_RECEIVER] = CStringGetTextDatum(s.wal_receiver);
	values[GR_STATUS_SLEEP_VOLUME_IOS] = Int64GetDatum((int64) s.sleep_volume_ios);
	values[GR_STATUS_SLEEP_VOLUME_SPIN_UPS] = Int64GetDatum((int64) s.sleep_volume_spin_ups);
	values[GR_STATUS_UNAPPLIED_READS] = Int64GetDatum((int64) s.unapplied_reads);
	values[GR_STATUS_READ_TIME_MS] = Float8GetDatum(s.read_time_s * 1000.0);
	values[GR_STATUS_READ_TIME_MEASURED] = BoolGetDatum(s.read_time_measured);
	values[GR_STATUS_REPLAY_RATE] = Float8GetDatum(s.replay_rate);
	values[GR_STATUS_STEP_DONE] = Int64GetDatum((int64) s.step_done);
	values[GR_STATUS_STEP_TOTAL] = Int64GetDatum((int64) s.step_total);
	values[GR_STATUS_LAST_BATCH_WAKE_S] = Float8GetDatum(s.last_batch_wake_s);
	values[GR_STATUS_LAST_BATCH_PREFETCH_S] = Float8GetDatum(s.last_batch_prefetch_s);
	values[GR_STATUS_LAST_BATCH_APPLY_S] = Float8GetDatum(s.last_batch_apply_s);
	values[GR_STATUS_LAST_BATCH_FLUSH_S] = Float8GetDatum(s.last_batch_flush_s);
	values[GR_STATUS_LAST_BATCH_GAP_BLOCKS] = Int64GetDatum((int64) s.last_batch_gap_blocks);
	values[GR_STATUS_CARRIED_DIRTY_BUFFERS] = Int64GetDatum((int64) s.carried_dirty_buffers);
	values[GR_STATUS_CARRIED_WRITE_S] = Float8GetDatum(s.carried_write_s);
	values[GR_STATUS_WRITE_BACK] = CStringGetTextDatum(s.write_back);
	values[GR_STATUS_LAST_BATCH_ENDED_AT_CHECKPOINT] = BoolGetDatum(s.last_batch_ended_at_checkpoint);
	values[GR_STATUS_RESTARTPOINTS] = Int64GetDatum((int64) s.restartpoints);
	values[GR_STATUS_SPIN_CYCLE_BUDGET] = Int32GetDatum(s.spin_cycle_budget);
	values[GR_STATUS_PACED] = BoolGetDatum(s.paced);
	values[GR_STATUS_PACE_INTERVAL_S] = Float8GetDatum(s.pace_interval_s);
	values[GR_STATUS_LAST_BATCH_BLOCKS_CACHED] = Int64GetDatum((int64) s.last_batch_blocks_cached);
	values[GR_STATUS_WRITE_ONLY_BATCHES] = Int64GetDatum((int64) s.write_only_batches);

	/* What the scheduler measures means nothing while none runs. */
	if (!running)
	{
		int			col;

		for (col = GR_STATUS_UNAPPLIED_BYTES; col < GR_STATUS_NCOLS; col++)
			nulls[col] = true;
	}
	else
	{
		bool		compacted = s.batches > 0 && s.last_batch_compacted;

		nulls[GR_STATUS_R_GEN] = s.r_gen < 0;
		nulls[GR_STATUS_NEXT_BATCH_AT] = s.next_batch_at == 0;
		nulls[GR_STATUS_LAST_BATCH_START] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_DURATION_S] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_BYTES] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_RECORDS] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_BUFFERS_FLUSHED] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_WAKE_S] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_PREFETCH_S] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_APPLY_S] = s.batches == 0;
		nulls[GR_STATUS_LAST_BATCH_FLUSH_S] = s.batches == 0;
		nulls[GR_STATUS_WRITE_BACK] = s.write_back[0] == '\0';
		nulls[GR_STATUS_LAST_BATCH_ENDED_AT_CHECKPOINT] = s.batches == 0;
		nulls[GR_STATUS_CARRIED_WRITE_S] = !isfinite(s.carried_write_s);
		nulls[GR_STATUS_PACE_INTERVAL_S] = !s.paced;

		/* Compaction figures exist for batches run with mode = compact. */
		nulls[GR_STATUS_LAST_BATCH_WINDOWS] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_DECODED_RECORDS] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_BLOCK_REFS] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_DISTINCT_BLOCKS] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_READS_NEEDED] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_READS_AVOIDED] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_FOLD_RATIO] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_PREFETCH_IOS] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_PREFETCH_BYTES] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_SEQUENTIAL_SHARE] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_DECODE_SECONDS] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_BYTES_PER_BLOCK] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_HINT_EXTENTS] = !compacted;
		nulls[GR_STATUS_LAST_BATCH_GAP_BLOCKS] = !compacted;
		nulls[GR_STATUS_AGENT_MESSAGE] = s.agent_message[0] == '\0';
		nulls[GR_STATUS_RTO_ESTIMATE_S] = !isfinite(s.rto_estimate_s);
		nulls[GR_STATUS_STEP] = s.step[0] == '\0';
		nulls[GR_STATUS_STEP_STARTED_AT] = s.step[0] == '\0';
		nulls[GR_STATUS_VOLUME_STATE_AT] = s.volume_state_at == 0;
		nulls[GR_STATUS_SLEEP_VOLUME_IOS] = s.sleep_volume_ios < 0;
		nulls[GR_STATUS_SLEEP_VOLUME_SPIN_UPS] = s.sleep_volume_spin_ups < 0;
		nulls[GR_STATUS_STEP_DONE] = s.step[0] == '\0' || s.step_done < 0;
		nulls[GR_STATUS_STEP_TOTAL] = s.step[0] == '\0' || s.step_total < 0;
	}
	/* The last promotion outlives the scheduler. */
	nulls[GR_STATUS_LAST_PROMOTION_S] = s.last_promotion_s < 0;
	nulls[GR_STATUS_OPERATOR_PAUSED] = false;

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

static double
gr_nonnegative_arg(PG_FUNCTION_ARGS, int argno, const char *name)
{
	double		value = PG_GETARG_FLOAT8(argno);

	if (isnan(value) || value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a non-negative number", name)));
	return value;
}

/*
 * greenreplica_plan(r_gen, r_apl, rto, spin_up, window_size): the planner
 * itself, for operators sizing a standby and for tests.
 */
Datum
greenreplica_plan(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {0};
	double		r_gen = gr_nonnegative_arg(fcinfo, 0, "r_gen");
	double		r_apl = gr_nonnegative_arg(fcinfo, 1, "r_apl");
	double		rto = gr_nonnegative_arg(fcinfo, 2, "rto");
	double		spin_up = gr_nonnegative_arg(fcinfo, 3, "spin_up");
	int64		window_size = PG_GETARG_INT64(4);
	GrPlan		plan;

	if (window_size <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("window_size must be a positive number of bytes")));

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	gr_check_columns(tupdesc, 5, "greenreplica_plan()");

	plan = gr_plan_batches(r_gen, r_apl, rto, spin_up, (double) window_size);

	values[0] = Float8GetDatum(plan.t_apl);
	values[1] = Float8GetDatum(plan.t_wnd);
	values[2] = Int64GetDatum((int64) llround(plan.max_unapplied_bytes));
	values[3] = BoolGetDatum(plan.feasible);
	values[4] = CStringGetTextDatum(gr_plan_verdict_message(plan.verdict));
	if (!plan.feasible)
		nulls[0] = nulls[1] = nulls[2] = true;

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/* Ask the scheduler to start a batch now. */
Datum
greenreplica_batch_now(PG_FUNCTION_ARGS)
{
	Latch	   *latch;
	int			worker_pid;

	gr_require_preload("greenreplica_batch_now()");
	if (!RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("greenreplica_batch_now() can only be called on a standby")));

	SpinLockAcquire(&gr_state->mutex);
	worker_pid = gr_state->worker_pid;
	latch = gr_state->worker_latch;
	if (worker_pid != 0)
		gr_state->batch_requested = true;
	SpinLockRelease(&gr_state->mutex);

	if (worker_pid == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the greenreplica scheduler is not running"),
				 errhint("The scheduler starts once the standby reaches a consistent state with hot_standby = on.")));

	if (latch)
		SetLatch(latch);
	PG_RETURN_BOOL(true);
}
