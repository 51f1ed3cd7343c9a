/*-------------------------------------------------------------------------
 *
 * greenreplica.c
 *	  Module entry point: energy-efficient disaster-recovery standbys.
 *
 * greenreplica defers a standby's WAL replay into batches scheduled from
 * the operator's recovery time objective, so that the data volume can sleep
 * between batches.  Everything it does needs shared memory and a background
 * worker, hence it must be loaded via shared_preload_libraries, on the
 * primary (for the SQL API) as on every standby.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "greenreplica.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("greenreplica must be loaded via shared_preload_libraries"),
				 errhint("Add greenreplica to shared_preload_libraries in postgresql.conf "
						 "on the primary and on every standby, then restart the server.")));

	gr_define_gucs();
	gr_shmem_install_hooks();
	gr_install_redo_wrapper();
	gr_register_worker();
}
