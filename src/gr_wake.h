/*-------------------------------------------------------------------------
 *
 * gr_wake.h
 *	  Which wake a batch asks the storage agent for: a plain one, or one
 *	  for a window that only writes (issue 16, item 5).
 *
 * Pure logic, no PostgreSQL dependency (test/unit/test_wake.c).  The
 * PostgreSQL glue that counts the window's reads and maps its writes is
 * gr_wake_window.c.
 *
 * A window whose blocks all start from a full-page image or an init, or
 * are found in shared buffers or the OS page cache, or lie past their
 * relation's current end (redo extends the file), reads nothing from the
 * data volume: only its write-back touches the volume.  A layout with a
 * flash write buffer (QMD) can then keep its sleeping disks down and take
 * the writes in flash; the agent hears so through `wake` with
 * "writes_only" and the extents the window writes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GR_WAKE_H
#define GR_WAKE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum GrWakeKind
{
	GR_WAKE_PLAIN,				/* every member: the window reads the volume */
	GR_WAKE_WRITES_ONLY			/* only what the window's writes touch */
} GrWakeKind;

/* What the scheduler knows of a decoded window before it wakes the volume. */
typedef struct GrWakeInputs
{
	bool		decoded_whole;	/* decoded to the batch end: not split,
								 * aborted or stopped short */
	bool		split_on_reads; /* not whole only because it split at its
								 * read (or memory) bound: the batch can end
								 * there */
	uint64_t	reads_needed;	/* distinct blocks whose first reference is
								 * neither an image nor an init */
	uint64_t	in_shared_buffers;	/* of those, in shared buffers now */
	uint64_t	in_os_cache;	/* of the rest, in the OS page cache now */
	uint64_t	past_end;		/* of the rest, past the relation's end */
	bool		write_extents_complete; /* the written blocks' volume extents
										 * fit one request */
} GrWakeInputs;

/* The reads of a window left for the data volume after the filters. */
extern uint64_t gr_wake_reads_left(const GrWakeInputs *in);

/*
 * The wake to ask for; *why (when not NULL) gets a short reason for the
 * log.
 */
extern GrWakeKind gr_wake_kind(const GrWakeInputs *in, const char **why);

/*
 * Whether the batch must end where a window split at its read bound
 * stopped: a write-only wake covers only the WAL that was decoded.
 */
extern bool gr_wake_cuts_batch(const GrWakeInputs *in, GrWakeKind kind);

#endif							/* GR_WAKE_H */
