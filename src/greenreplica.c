/*-------------------------------------------------------------------------
 *
 * greenreplica.c
 *	  Module entry point: energy-efficient disaster-recovery standbys.
 *
 * greenreplica defers a standby's WAL replay into batches scheduled from
 * the operator's recovery time objective, so that the data volume can sleep
 * between batches.  Everything it does needs shared memory and a background
 * worker, hence it must be loaded via shared_preload_libraries on every
 * standby (and on the primary, for the status view).  Loaded otherwise, it
 * only lets CREATE EXTENSION and the planner function work.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "greenreplica.h"

#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 160000
#error "greenreplica supports PostgreSQL 15 only (RmgrTable, recovery pause and walreceiver internals)"
#endif

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	/*
	 * As pg_stat_statements does: loaded any other way (CREATE EXTENSION or
	 * the restore of a dump on a server without the preload, LOAD), define
	 * nothing that needs shared memory; the SQL functions that need it say
	 * so when called (gr_require_preload()).
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;

	gr_define_gucs();
	gr_shmem_install_hooks();
	gr_install_redo_wrapper();
	gr_install_pause_hooks();
	gr_register_worker();
}

void
gr_require_preload(const char *function)
{
	if (gr_state == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s needs greenreplica loaded via shared_preload_libraries", function),
				 errhint("Add greenreplica to shared_preload_libraries in postgresql.conf "
						 "on the primary and on every standby, then restart the server.")));
}
