/*-------------------------------------------------------------------------
 *
 * gr_fold.h
 *	  The window's block set: folding a stream of WAL block references.
 *
 * Pure logic, no PostgreSQL dependency, so that it can be unit-tested
 * (test/unit/test_fold.c).  The PostgreSQL glue that feeds it decoded WAL
 * lives in gr_window.c; the reads it plans are done by gr_prefetch.c.
 *
 * Every distinct block of the window is kept once, with the LSNs of its
 * first and last reference and the number of references.  A block whose
 * first reference in the window restores a full-page image or initializes
 * the page needs no read at all; every other block needs exactly one read,
 * however many records touch it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef GR_FOLD_H
#define GR_FOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A block, in physical order: (tablespace, database, relation, fork, block). */
typedef struct GrBlockKey
{
	uint32_t	spc;
	uint32_t	db;
	uint32_t	rel;
	int32_t		fork;
	uint32_t	block;
} GrBlockKey;

typedef struct GrFoldEntry
{
	GrBlockKey	key;
	bool		used;
	bool		no_read;		/* first reference is an applied image or
								 * an init: never read */
	uint32_t	refs;
	uint64_t	first_lsn;
	uint64_t	last_lsn;
} GrFoldEntry;

/* Memory comes from the caller: palloc in a memory context, or malloc. */
typedef void *(*GrFoldAlloc) (void *arg, size_t size);
typedef void (*GrFoldFree) (void *arg, void *ptr);

typedef struct GrFold
{
	GrFoldEntry *entries;
	uint32_t	capacity;		/* a power of 2 */
	uint64_t	distinct;		/* used entries */
	uint64_t	block_refs;
	uint64_t	reads_needed;
	GrFoldAlloc alloc;
	GrFoldFree	free;
	void	   *alloc_arg;
} GrFold;

/* Figures of a folded window. */
typedef struct GrFoldFigures
{
	uint64_t	block_refs;
	uint64_t	distinct_blocks;
	uint64_t	reads_needed;
	uint64_t	reads_avoided;	/* distinct blocks whose first reference is
								 * an image or an init */
	double		fold_ratio;		/* block references per distinct block */
	uint64_t	index_bytes;	/* memory of the hash table */
	double		bytes_per_block;	/* index memory per distinct block */
} GrFoldFigures;

/* Physical runs of a sorted list of blocks. */
typedef struct GrRunFigures
{
	uint64_t	blocks;
	uint64_t	runs;			/* maximal runs of consecutive blocks */
	double		sequential_share;	/* share of blocks read as part of a
									 * run, after its first block */
} GrRunFigures;

/*
 * A range of one file read as one request: from "first" for "nblocks"
 * blocks, of which "needed" are blocks the window reads (the rest are gap
 * blocks read through because that is cheaper than repositioning).
 */
typedef struct GrBlockRange
{
	uint32_t	first;
	uint32_t	nblocks;
	uint32_t	needed;
} GrBlockRange;

extern bool gr_fold_init(GrFold *fold, uint32_t initial_capacity,
						 GrFoldAlloc alloc, GrFoldFree free, void *alloc_arg);
extern void gr_fold_destroy(GrFold *fold);
extern bool gr_fold_add(GrFold *fold, const GrBlockKey *key, uint64_t lsn,
						bool no_read);
extern const GrFoldEntry *gr_fold_lookup(const GrFold *fold, const GrBlockKey *key);
extern bool gr_fold_would_read(const GrFold *fold, const GrBlockKey *key, bool no_read);
extern GrFoldFigures gr_fold_figures(const GrFold *fold);
extern int	gr_block_key_cmp(const GrBlockKey *a, const GrBlockKey *b);
extern bool gr_block_key_follows(const GrBlockKey *prev, const GrBlockKey *next);
extern uint64_t gr_fold_collect_reads(const GrFold *fold, GrBlockKey *out);
extern uint64_t gr_fold_collect_blocks(const GrFold *fold, GrBlockKey *out);
extern GrRunFigures gr_run_figures(const GrBlockKey *sorted, uint64_t n);
extern uint64_t gr_merge_ranges(const GrBlockKey *sorted, uint64_t n,
								uint32_t max_gap, GrBlockRange *out);
extern uint32_t gr_break_even_gap(double reposition_ms, double block_transfer_ms);

#endif							/* GR_FOLD_H */
