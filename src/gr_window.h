/*-------------------------------------------------------------------------
 *
 * gr_window.h
 *	  Eager compaction: decode a window of received WAL into its block set
 *	  (gr_window.c) and prefetch the blocks that need a read (gr_prefetch.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef GR_WINDOW_H
#define GR_WINDOW_H

#include "access/xlogdefs.h"
#include "utils/palloc.h"

#include "gr_fold.h"
#include "gr_wake.h"

/* Returns true when the caller must stop at once (promotion, shutdown). */
typedef bool (*GrAbortCheck) (void);

typedef struct GrWindow
{
	MemoryContext cxt;			/* lives for the window; reset per window */
	GrFold		fold;
	XLogRecPtr	start;			/* replay position when decoded */
	XLogRecPtr	end;			/* requested end: WAL received at batch start */
	XLogRecPtr	apply_to;		/* where APPLY stops: end, or the split */
	bool		split;			/* ended early: too many reads for memory */
	bool		aborted;		/* decode stopped by the abort check */
	bool		incomplete;		/* decode stopped short (message says why) */
	bool		ends_before_partial_record; /* end fell inside a record not all
										 * received: apply_to is before it */
	char		message[128];
	XLogRecPtr	last_checkpoint_end;	/* end of the window's last checkpoint
										 * record; invalid when none */
	uint64		records;
	uint64		decoded_bytes;
	double		decode_seconds;

	/* the blocks needing a read, sorted; see gr_window_sorted_reads() */
	GrBlockKey *reads;
	uint64		nreads;

	/* the volume's alignment boundaries over the window's span (gr_align.c) */
	uint64	   *bounds;
	int			nbounds;
} GrWindow;

/*
 * The backlog's cost, counted incrementally during SLEEP (gr_window.c): the
 * received WAL past the replay position, its distinct blocks that will need
 * a read, and its bytes.
 */
typedef struct GrBacklog
{
	MemoryContext cxt;
	struct XLogReaderState *reader; /* kept between calls */
	void	   *priv;			/* the reader's timelines */
	GrFold		fold;
	bool		valid;			/* counting from "start" */
	XLogRecPtr	start;			/* replay position counted from */
	XLogRecPtr	decoded_to;		/* end of the last record counted */
	uint64		records;
	uint64		reads;			/* distinct blocks that need a read */
	uint64		cached;			/* in shared buffers when first seen */
	uint64		overflow_reads; /* counted without folding: block set full */
} GrBacklog;

extern void gr_backlog_init(GrBacklog *backlog, MemoryContext parent);
extern void gr_backlog_reset(GrBacklog *backlog);
extern void gr_backlog_advance(GrBacklog *backlog, uint64 max_records,
								XLogRecPtr upto);

/* Volume extents of a window, for the agent's "hint" op (gr_hint.c). */
#define GR_HINT_MAX_EXTENTS		8192

typedef struct GrExtent
{
	uint64		offset;
	uint64		length;
} GrExtent;

typedef struct GrHintExtents
{
	GrExtent   *extents;
	int			count;
	int			files;			/* relation files mapped */
	bool		truncated;		/* more than GR_HINT_MAX_EXTENTS */
} GrHintExtents;

typedef struct GrPrefetchResult
{
	uint64		blocks_planned; /* blocks needing a read, from the fold */
	uint64		blocks_read;	/* read from the data volume */
	uint64		blocks_cached;	/* already in shared buffers */
	uint64		blocks_skipped; /* relation gone or block past its end */
	uint64		ios;			/* merged contiguous reads */
	uint64		bytes;
	double		sequential_share;	/* blocks read after the first of a run */
	uint64		gap_blocks;		/* os_cache: blocks read through between
								 * needed ones */
	uint64		crossings_before;	/* os_cache: boundaries inside the ranges,
									 * before and after alignment */
	uint64		crossings_after;
	uint64		aligned_cuts;	/* ranges cut at a boundary */
	uint64		aligned_extensions; /* ranges extended to a track end */
	double		seconds;
	bool		aborted;
} GrPrefetchResult;

extern bool gr_block_in_shared_buffers(const GrBlockKey *key);
extern void gr_window_init(GrWindow *window, MemoryContext parent);
extern void gr_window_decode(GrWindow *window, XLogRecPtr start, XLogRecPtr end,
							 uint64 max_reads, GrAbortCheck abort_check);
extern uint64 gr_window_max_reads(void);
extern uint64 gr_window_max_entries(void);
extern void gr_window_release(GrWindow *window);
extern uint64 gr_window_sorted_reads(GrWindow *window, const GrBlockKey **reads);
extern void gr_window_hint_extents(GrWindow *window, GrHintExtents *hint);
extern void gr_window_write_extents(GrWindow *window, GrHintExtents *hint);
extern void gr_window_wake_inputs(GrWindow *window, GrWakeInputs *in);
extern uint64 gr_hint_map(int fd, uint64 start, uint64 length, GrHintExtents *hint);
/* alignment to the agent's boundaries (gr_align.c) */
struct GrAlignParams;
extern void gr_align_window(GrWindow *window, GrHintExtents *hint);
extern void gr_align_params(struct GrAlignParams *params, bool may_extend);
extern void gr_prefetch_window(GrWindow *window, GrPrefetchResult *result,
							   GrAbortCheck abort_check);
/* the os_cache read path */
extern uint64 gr_prefetch_max_reads(void);
extern uint64 gr_physical_offset(int fd, uint64 offset);

#endif							/* GR_WINDOW_H */
