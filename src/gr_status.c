/*-------------------------------------------------------------------------
 *
 * gr_status.c
 *	  SQL API: the greenreplica_status() function behind the view.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "greenreplica.h"

PG_FUNCTION_INFO_V1(greenreplica_status);

/* Columns of greenreplica_status(), in order. */
enum
{
	GR_STATUS_ROLE,
	GR_STATUS_MODE,
	GR_STATUS_PHASE,
	GR_STATUS_WORKER_PID,
	GR_STATUS_NCOLS
};

Datum
greenreplica_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[GR_STATUS_NCOLS];
	bool		nulls[GR_STATUS_NCOLS];
	GrPhase		phase;
	int			worker_pid;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != GR_STATUS_NCOLS)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("greenreplica_status() returns %d columns, the library expects %d",
						tupdesc->natts, GR_STATUS_NCOLS),
				 errhint("Run ALTER EXTENSION greenreplica UPDATE on the primary.")));

	SpinLockAcquire(&gr_state->mutex);
	phase = gr_state->phase;
	worker_pid = gr_state->worker_pid;
	SpinLockRelease(&gr_state->mutex);

	memset(nulls, 0, sizeof(nulls));
	values[GR_STATUS_ROLE] =
		CStringGetTextDatum(RecoveryInProgress() ? "standby" : "primary");
	values[GR_STATUS_MODE] = CStringGetTextDatum(gr_mode_name(gr_mode));
	values[GR_STATUS_PHASE] = CStringGetTextDatum(gr_phase_name(phase));
	if (worker_pid != 0)
		values[GR_STATUS_WORKER_PID] = Int32GetDatum(worker_pid);
	else
		nulls[GR_STATUS_WORKER_PID] = true;

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}
