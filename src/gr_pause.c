/*-------------------------------------------------------------------------
 *
 * gr_pause.c
 *	  Who paused replay: the operator's pg_wal_replay_pause() and
 *	  pg_wal_replay_resume(), seen by every backend.
 *
 * PostgreSQL keeps one pause flag for everybody: the scheduler's batch
 * cycle, an operator's pg_wal_replay_pause() and a reached recovery target
 * all set it, and a pause that is already in effect looks the same whoever
 * asked for it.  The scheduler must never release a pause it did not
 * request, so each backend reports a successful call of the two SQL
 * functions to shared memory, and the scheduler reads the report every tick.
 *
 * Both functions are built-ins, which the function manager calls without
 * consulting its hooks; so the call is found in the analyzed query (a call
 * in any expression, subquery or function body run through SPI) and
 * reported when that query's execution ends without error.  A call from a
 * plan cached before the library was loaded is not seen; the scheduler then
 * still notices a resume (its own pause vanishes).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "nodes/nodeFuncs.h"
#include "parser/analyze.h"
#include "utils/fmgroids.h"
#include "utils/timestamp.h"

#include "greenreplica.h"

#define GR_CALLS_PAUSE		0x01
#define GR_CALLS_RESUME		0x02

static post_parse_analyze_hook_type prev_post_parse_analyze_hook = NULL;
static ExecutorEnd_hook_type prev_ExecutorEnd = NULL;

/* Calls found in the query analyzed last, reported when it has run. */
static int	gr_pending_calls = 0;

static bool
gr_find_pause_calls(Node *node, int *found)
{
	if (node == NULL)
		return false;
	if (IsA(node, FuncExpr))
	{
		Oid			funcid = ((FuncExpr *) node)->funcid;

		if (funcid == F_PG_WAL_REPLAY_PAUSE)
			*found |= GR_CALLS_PAUSE;
		else if (funcid == F_PG_WAL_REPLAY_RESUME)
			*found |= GR_CALLS_RESUME;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, gr_find_pause_calls, found, 0);
	return expression_tree_walker(node, gr_find_pause_calls, found);
}

static void
gr_post_parse_analyze(ParseState *pstate, Query *query, JumbleState *jstate)
{
	int			found = 0;

	if (prev_post_parse_analyze_hook)
		prev_post_parse_analyze_hook(pstate, query, jstate);

	if (query->commandType != CMD_UTILITY)
		(void) query_tree_walker(query, gr_find_pause_calls, &found, 0);
	gr_pending_calls = found;
}

static void
gr_ExecutorEnd(QueryDesc *queryDesc)
{
	int			calls = gr_pending_calls;

	if (prev_ExecutorEnd)
		prev_ExecutorEnd(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);

	gr_pending_calls = 0;
	if (calls == 0 || gr_state == NULL)
		return;

	SpinLockAcquire(&gr_state->mutex);
	if (calls & GR_CALLS_RESUME)
	{
		gr_state->operator_paused = false;
		gr_state->operator_resumes++;
	}
	else
	{
		gr_state->operator_paused = true;
		gr_state->operator_paused_at = GetCurrentTimestamp();
	}
	SpinLockRelease(&gr_state->mutex);
}

void
gr_install_pause_hooks(void)
{
	prev_post_parse_analyze_hook = post_parse_analyze_hook;
	post_parse_analyze_hook = gr_post_parse_analyze;
	prev_ExecutorEnd = ExecutorEnd_hook;
	ExecutorEnd_hook = gr_ExecutorEnd;
}
