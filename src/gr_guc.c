/*-------------------------------------------------------------------------
 *
 * gr_guc.c
 *	  The greenreplica.* configuration parameters.
 *
 * Every parameter is reloadable (PGC_SIGHUP): an operator tunes the RTO or
 * the window on a running standby without a restart.  Integer parameters
 * carry their range, so PostgreSQL itself refuses a bad value at ALTER
 * SYSTEM or reload time with a message that names the allowed range.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>
#include <sys/un.h>

#include "utils/guc.h"

#include "greenreplica.h"

/* Upper bounds, chosen so that every product stays well inside int64. */
#define GR_MAX_RTO_S			(7 * 24 * 3600) /* one week */
#define GR_MAX_WINDOW_SIZE_MB	(1024 * 1024)	/* 1 TB */
#define GR_MAX_SPIN_CYCLES		1440	/* one a minute */

int			gr_mode = GR_MODE_COMPACT;
int			gr_rto_s = 100;
int			gr_window_size_mb = 512;
char	   *gr_agent_socket = NULL;
char	   *gr_agent_volume = NULL;
int			gr_max_spin_cycles_per_day = 24;
int			gr_debug_prefetch_delay_ms = 0;
int			gr_debug_flush_delay_ms = 0;
bool		gr_debug_prefetch_resident = false;
int			gr_max_apply_delay_s = 300;
int			gr_prefetch_method = GR_PREFETCH_BUFFERS;
int			gr_prefetch_merge_gap = 32;
int			gr_boundary_slack_kb = 32;
int			gr_initial_read_time_ms = 20;
bool		gr_carry_dirty_buffers = false;

static const struct config_enum_entry gr_mode_options[] = {
	{"off", GR_MODE_OFF, false},
	{"defer", GR_MODE_DEFER, false},
	{"compact", GR_MODE_COMPACT, false},
	{NULL, 0, false}
};

static const struct config_enum_entry gr_prefetch_method_options[] = {
	{"buffers", GR_PREFETCH_BUFFERS, false},
	{"os_cache", GR_PREFETCH_OS_CACHE, false},
	{NULL, 0, false}
};

const char *
gr_mode_name(int mode)
{
	const struct config_enum_entry *entry;

	for (entry = gr_mode_options; entry->name != NULL; entry++)
	{
		if (entry->val == mode)
			return entry->name;
	}
	return "unknown";
}

/*
 * The agent socket must be an absolute path that fits in sun_path; empty
 * means "no storage agent".
 */
static bool
check_agent_socket(char **newval, void **extra, GucSource source)
{
	const char *path = *newval;
	struct sockaddr_un addr;

	if (path == NULL || path[0] == '\0')
		return true;

	if (!is_absolute_path(path))
	{
		GUC_check_errdetail("The storage agent socket must be an absolute path, or empty for no agent.");
		return false;
	}
	if (strlen(path) >= sizeof(addr.sun_path))
	{
		GUC_check_errdetail("The storage agent socket path must be shorter than %d bytes.",
							(int) sizeof(addr.sun_path));
		return false;
	}
	return true;
}

void
gr_define_gucs(void)
{
	DefineCustomEnumVariable("greenreplica.mode",
							 "Selects how a standby replays WAL.",
							 "off replays as PostgreSQL does; defer replays in batches "
							 "scheduled from greenreplica.rto; compact also folds and "
							 "sorts each batch's block I/O.",
							 &gr_mode,
							 GR_MODE_COMPACT,
							 gr_mode_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("greenreplica.rto",
							"Recovery time objective: the longest a promotion may take.",
							"Bounds how much unapplied WAL a standby may hold back.",
							&gr_rto_s,
							100,
							1, GR_MAX_RTO_S,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("greenreplica.window_size",
							"Largest amount of WAL replayed in one batch.",
							NULL,
							&gr_window_size_mb,
							512,
							1, GR_MAX_WINDOW_SIZE_MB,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomStringVariable("greenreplica.agent_socket",
							   "Control socket of the greenreplica storage agent.",
							   "Empty means no storage agent: batches still run, "
							   "but nobody spins the data volume down.",
							   &gr_agent_socket,
							   "",
							   PGC_SIGHUP,
							   0,
							   check_agent_socket, NULL, NULL);

	DefineCustomStringVariable("greenreplica.agent_volume",
							   "Storage agent volume that holds this standby's data.",
							   "The volume the scheduler wakes before a batch and puts "
							   "to sleep after it.",
							   &gr_agent_volume,
							   "",
							   PGC_SIGHUP,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("greenreplica.max_spin_cycles_per_day",
							"Largest number of data-volume spin-down/spin-up cycles per day.",
							"Drives are rated for a limited number of start/stop cycles; "
							"0 keeps the volume spinning.",
							&gr_max_spin_cycles_per_day,
							24,
							0, GR_MAX_SPIN_CYCLES,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("greenreplica.max_apply_delay",
							"Longest time received WAL may wait before a batch applies it.",
							"A batch starts when the oldest unapplied WAL is this old, "
							"whatever the RTO-based plan says; 0 means no bound.",
							&gr_max_apply_delay_s,
							300,
							0, GR_MAX_RTO_S,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("greenreplica.prefetch_method",
							 "Selects how PREFETCH reads a window's blocks (mode = compact).",
							 "buffers reads them into shared buffers, run by run, and splits "
							 "a window whose reads exceed a quarter of shared_buffers; "
							 "os_cache issues the whole read set at once as ranges merged "
							 "across gaps, in physical order, into the OS page cache.",
							 &gr_prefetch_method,
							 GR_PREFETCH_BUFFERS,
							 gr_prefetch_method_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("greenreplica.prefetch_merge_gap",
							"Largest gap between two needed blocks that os_cache reads through.",
							"Reading through a gap of g blocks costs g block transfers, "
							"repositioning costs a seek plus half a rotation: set it to "
							"(seek + half rotation) / block transfer time of the data drive.",
							&gr_prefetch_merge_gap,
							32,
							0, RELSEG_SIZE,
							PGC_SIGHUP,
							GUC_UNIT_BLOCKS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("greenreplica.boundary_slack",
							"Largest overhang past a volume boundary that a prefetch run is aligned for.",
							"The storage agent cuts requests at chunk and member track ends; "
							"a run crossing one by at most this much is cut at it, or for "
							"os_cache reads extended to the end of that track when that takes "
							"in the track's other runs.  0 turns alignment off.",
							&gr_boundary_slack_kb,
							32,
							0, 1024,
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("greenreplica.initial_read_time",
							"Time of one block read assumed until batches have measured it.",
							"The RTO estimate charges this much per block the backlog "
							"must read, until a batch measures it; set it to a cold "
							"random read of the data volume, or above.",
							&gr_initial_read_time_ms,
							20,
							1, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("greenreplica.carry_dirty_buffers",
							 "Lets a batch leave its dirty buffers for a later batch's write-back.",
							 "The write-back then happens in one sorted burst when the dirty "
							 "share of shared_buffers, a due restartpoint or the RTO requires "
							 "it; needs bgwriter_lru_maxpages = 0.",
							 &gr_carry_dirty_buffers,
							 false,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	/*
	 * A developer option, hidden from SHOW ALL and pg_settings: makes every
	 * prefetch take this long more, so that tests can act during PREFETCH.
	 */
	DefineCustomIntVariable("greenreplica.debug_prefetch_delay",
							"Delays each prefetch by this long (for tests).",
							NULL,
							&gr_debug_prefetch_delay_ms,
							0,
							0, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	/*
	 * Likewise: FLUSH takes this long more before it decides about the
	 * volume's sleep, as when it blocks in a restartpoint or a sync, so that
	 * tests can promote during FLUSH.
	 */
	DefineCustomIntVariable("greenreplica.debug_flush_delay",
							"Delays each batch's FLUSH by this long (for tests).",
							NULL,
							&gr_debug_flush_delay_ms,
							0,
							0, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	/*
	 * Likewise, for benchmarks: prefetch_method = os_cache reads the blocks
	 * already in shared buffers too, as it did before it left them out, so
	 * that one run can measure what leaving them out is worth.
	 */
	DefineCustomBoolVariable("greenreplica.debug_prefetch_resident",
							 "Reads blocks already in shared buffers with prefetch_method = os_cache (for benchmarks).",
							 NULL,
							 &gr_debug_prefetch_resident,
							 false,
							 PGC_SIGHUP,
							 GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);

	MarkGUCPrefixReserved("greenreplica");
}
