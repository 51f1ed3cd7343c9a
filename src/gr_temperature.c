/*-------------------------------------------------------------------------
 *
 * gr_temperature.c
 *	  greenreplica_set_tablespace_temperature(): mark a tablespace hot, cold
 *	  or normal on the storage agent's volume;
 *	  greenreplica_set_volume_temperature(): mark the whole volume.
 *
 * A DBA thinks in tablespaces, the agent in volume byte ranges (QMD's
 * partial on-line mirrors: a mirrored pair holding only cold ranges may
 * sleep whole).  The function maps every file of the tablespace to its
 * physical extents with FIEMAP (the same map as the window's hint, see
 * gr_hint.c) and sends them with the agent's "set_temperature" op.  The
 * filesystem of a tablespace on an agent volume sits directly on the
 * volume's device, so its physical offsets are the volume's; a tablespace on
 * the filesystem of pg_wal (pg_default, pg_global, by design the always-on
 * log volume) is refused.  The extents are those of the files now: a
 * relation that grows later keeps its new extents unmarked until the
 * function runs again.
 *
 * A QMD pair sleeps whole only when every byte it holds is marked (ext4's
 * own metadata lies on the volume too), so the usual sequence is the whole
 * volume cold with greenreplica_set_volume_temperature(), then the hot
 * tablespaces hot: the agent applies marks in order, a later one replacing
 * an earlier one where they overlap.
 *
 * Both run wherever greenreplica.agent_socket names an agent: on the standby
 * whose data volume the agent serves (a primary normally has none).  They
 * only read the catalog and the filesystem, so hot standby allows them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/xlog_internal.h"
#include "catalog/pg_tablespace_d.h"
#include "commands/tablespace.h"
#include "common/relpath.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "gr_agent.h"
#include "gr_window.h"

PG_FUNCTION_INFO_V1(greenreplica_set_tablespace_temperature);
PG_FUNCTION_INFO_V1(greenreplica_set_volume_temperature);

/* Refuse a temperature the agent does not know, before asking it anything. */
static void
gr_check_temperature(const char *temperature)
{
	if (strcmp(temperature, "hot") != 0 && strcmp(temperature, "cold") != 0 &&
		strcmp(temperature, "normal") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid temperature \"%s\"", temperature),
				 errhint("Valid temperatures are \"hot\", \"cold\" and \"normal\".")));
}

/*
 * The agent's settings exist only when the library is preloaded (a library
 * loaded by CREATE EXTENSION alone defines no GUCs): say that first.
 */
static void
gr_check_agent_configured(const char *function)
{
	gr_require_preload(function);
	if (!gr_agent_configured())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("no storage agent is configured"),
				 errhint("Set greenreplica.agent_socket and greenreplica.agent_volume.")));
}

/* The directory holding a tablespace's database directories. */
static char *
gr_tablespace_dir(Oid spcoid)
{
	if (spcoid == DEFAULTTABLESPACE_OID)
		return pstrdup("base");
	if (spcoid == GLOBALTABLESPACE_OID)
		return pstrdup("global");
	return psprintf("pg_tblspc/%u/%s", spcoid, TABLESPACE_VERSION_DIRECTORY);
}

/* Files of the tablespace left out of the marking, or only partly marked. */
typedef struct GrSkipped
{
	int			files;
	int			warned;
} GrSkipped;

/* Warnings about skipped files, before one summary for the rest. */
#define GR_SKIPPED_WARNINGS		10

/*
 * A file that could not be (wholly) marked: the DBA hears which, since that
 * part of the tablespace keeps its old temperature.
 */
static void
gr_skip_file(GrSkipped *skipped, const char *path, const char *why)
{
	skipped->files++;
	if (skipped->warned++ < GR_SKIPPED_WARNINGS)
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("file \"%s\" was not marked: %s", path, why),
				 errhint("Its volume range keeps its temperature.  Run the function again after a restartpoint has written the file out.")));
}

/*
 * Append the extents of every regular file under dir (one level of subdirectories).
 * Every file must be on the tablespace's own file system (dev): FIEMAP offsets of
 * another device would mark the wrong ranges of the agent's volume.  Files that
 * cannot be opened or mapped are counted in skipped, each with a WARNING.
 */
static void
gr_map_directory(const char *dir, int depth, dev_t dev, GrHintExtents *extents,
				 GrSkipped *skipped)
{
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;

	while ((de = ReadDir(d, dir)) != NULL && !extents->truncated)
	{
		char	   *path;
		struct stat st;

		CHECK_FOR_INTERRUPTS();
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		path = psprintf("%s/%s", dir, de->d_name);
		if (lstat(path, &st) != 0)
		{
			/* a relation dropped meanwhile is no loss; anything else is */
			if (errno != ENOENT)
				gr_skip_file(skipped, path, strerror(errno));
			pfree(path);
			continue;
		}
		if ((S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) && st.st_dev != dev)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("\"%s\" is on another file system than its tablespace", path),
					 errdetail("Its volume offsets would not be the storage agent volume's.")));
		if (S_ISDIR(st.st_mode) && depth > 0)
			gr_map_directory(path, depth - 1, dev, extents, skipped);
		else if (S_ISREG(st.st_mode) && st.st_size > 0)
		{
			int			fd = OpenTransientFile(path, O_RDONLY | O_NOFOLLOW | PG_BINARY);

			if (fd >= 0)
			{
				uint64		unmapped;

				extents->files++;
				unmapped = gr_hint_map(fd, 0, (uint64) st.st_size, extents);
				CloseTransientFile(fd);
				if (unmapped > 0)
					gr_skip_file(skipped, path,
								 psprintf("the file system could not map " UINT64_FORMAT " of its " UINT64_FORMAT " bytes to the volume (not yet allocated, or no extent map)",
										  unmapped, (uint64) st.st_size));
			}
			else if (errno != ENOENT)
				gr_skip_file(skipped, path, psprintf("could not open it: %m"));
		}
		pfree(path);
	}
	FreeDir(d);
}

static int
gr_extent_cmp(const void *a, const void *b)
{
	const GrExtent *x = a;
	const GrExtent *y = b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return 0;
}

/*
 * greenreplica_set_tablespace_temperature(tablespace name, temperature text)
 * returns the volume extents sent, the files mapped and the files skipped
 * (extension 0.7; under 0.6's definition, the extents alone).
 */
Datum
greenreplica_set_tablespace_temperature(PG_FUNCTION_ARGS)
{
	char	   *spcname = NameStr(*PG_GETARG_NAME(0));
	char	   *temperature = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Oid			spcoid;
	char	   *dir;
	struct stat wal_st;
	struct stat spc_st;
	GrHintExtents extents;
	GrSkipped	skipped = {0};
	char		err[256];
	int			ranges;
	bool		refused;
	TupleDesc	tupdesc;

	gr_check_temperature(temperature);
	spcoid = get_tablespace_oid(spcname, false);
	gr_check_agent_configured("greenreplica_set_tablespace_temperature()");

	dir = gr_tablespace_dir(spcoid);
	if (stat(XLOGDIR, &wal_st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat directory \"%s\": %m", XLOGDIR)));
	if (stat(dir, &spc_st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat directory \"%s\": %m", dir)));
	if (spc_st.st_dev == wal_st.st_dev)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tablespace \"%s\" is on the file system of pg_wal, not on a storage agent volume",
						spcname)));

	extents.count = 0;
	extents.files = 0;
	extents.truncated = false;
	extents.extents = palloc(sizeof(GrExtent) * GR_HINT_MAX_EXTENTS);
	gr_map_directory(dir, 1, spc_st.st_dev, &extents, &skipped);
	if (skipped.warned > GR_SKIPPED_WARNINGS)
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%d more files of tablespace \"%s\" were not marked",
						skipped.warned - GR_SKIPPED_WARNINGS, spcname)));
	if (extents.truncated)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("tablespace \"%s\" has more than %d extents", spcname,
						GR_HINT_MAX_EXTENTS)));
	qsort(extents.extents, extents.count, sizeof(GrExtent), gr_extent_cmp);

	if (!gr_agent_set_temperature(extents.extents, extents.count, temperature,
								  &ranges, &refused, err, sizeof(err)))
		ereport(ERROR,
				(errcode(refused ? ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE :
						 ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not mark tablespace \"%s\" %s on the storage agent",
						spcname, temperature),
				 errdetail_internal("%s", err)));

	ereport(DEBUG1,
			(errmsg_internal("tablespace \"%s\": %d files, %d extents marked %s, %d files skipped; the agent holds %d ranges",
							 spcname, extents.files, extents.count, temperature,
							 skipped.files, ranges)));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) == TYPEFUNC_COMPOSITE)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		if (tupdesc->natts != 3)
			elog(ERROR, "greenreplica_set_tablespace_temperature() must return 3 columns");
		tupdesc = BlessTupleDesc(tupdesc);
		values[0] = Int32GetDatum(extents.count);
		values[1] = Int32GetDatum(extents.files);
		values[2] = Int32GetDatum(skipped.files);
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
	}
	PG_RETURN_INT32(extents.count);
}

/*
 * greenreplica_set_volume_temperature(temperature text) marks the whole
 * volume, [0, capacity): before the hot tablespaces are marked hot, it
 * leaves no byte unmarked (extension 0.8).  Returns the bytes marked and the
 * ranges the agent holds afterwards.
 */
Datum
greenreplica_set_volume_temperature(PG_FUNCTION_ARGS)
{
	char	   *temperature = text_to_cstring(PG_GETARG_TEXT_PP(0));
	GrExtent	whole;
	uint64		capacity;
	char		err[256];
	int			ranges;
	bool		refused;
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	gr_check_temperature(temperature);
	gr_check_agent_configured("greenreplica_set_volume_temperature()");

	if (!gr_agent_volume_capacity(&capacity, err, sizeof(err)))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not read the capacity of volume \"%s\" from the storage agent",
						gr_agent_volume ? gr_agent_volume : ""),
				 errdetail_internal("%s", err)));
	whole.offset = 0;
	whole.length = capacity;
	if (!gr_agent_set_temperature(&whole, 1, temperature, &ranges, &refused,
								  err, sizeof(err)))
		ereport(ERROR,
				(errcode(refused ? ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE :
						 ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not mark volume \"%s\" %s on the storage agent",
						gr_agent_volume ? gr_agent_volume : "", temperature),
				 errdetail_internal("%s", err)));

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	values[0] = Int64GetDatum((int64) capacity);
	values[1] = Int32GetDatum(ranges);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
