/*-------------------------------------------------------------------------
 *
 * gr_fold.c
 *	  The window's block set: an open-addressing hash table of the blocks a
 *	  WAL window references, and the figures of the fold.  Pure logic (see
 *	  gr_fold.h); no PostgreSQL headers here.
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>

#include "gr_fold.h"

/* Grow when more than 3/4 of the slots are used. */
#define GR_FOLD_MAX_FILL(capacity)	((uint64_t) (capacity) / 4 * 3)

static uint32_t
gr_block_key_hash(const GrBlockKey *key)
{
	uint64_t	h = 0x9E3779B97F4A7C15ULL;

	h ^= key->spc;
	h *= 0xBF58476D1CE4E5B9ULL;
	h ^= key->db + ((uint64_t) key->rel << 32);
	h *= 0x94D049BB133111EBULL;
	h ^= (uint64_t) (uint32_t) key->fork << 32 | key->block;
	h *= 0xBF58476D1CE4E5B9ULL;
	h ^= h >> 31;
	return (uint32_t) (h ^ (h >> 32));
}

static bool
gr_block_key_equal(const GrBlockKey *a, const GrBlockKey *b)
{
	return a->block == b->block && a->rel == b->rel && a->fork == b->fork &&
		a->db == b->db && a->spc == b->spc;
}

static uint32_t
gr_round_capacity(uint32_t n)
{
	uint32_t	capacity = 64;

	while (capacity < n && capacity < (UINT32_C(1) << 31))
		capacity <<= 1;
	return capacity;
}

bool
gr_fold_init(GrFold *fold, uint32_t initial_capacity,
			 GrFoldAlloc alloc, GrFoldFree free_fn, void *alloc_arg)
{
	memset(fold, 0, sizeof(*fold));
	fold->alloc = alloc;
	fold->free = free_fn;
	fold->alloc_arg = alloc_arg;
	fold->capacity = gr_round_capacity(initial_capacity);
	fold->entries = alloc(alloc_arg, sizeof(GrFoldEntry) * fold->capacity);
	if (fold->entries == NULL)
		return false;
	memset(fold->entries, 0, sizeof(GrFoldEntry) * fold->capacity);
	return true;
}

void
gr_fold_destroy(GrFold *fold)
{
	if (fold->entries != NULL && fold->free != NULL)
		fold->free(fold->alloc_arg, fold->entries);
	fold->entries = NULL;
	fold->capacity = 0;
}

static GrFoldEntry *
gr_fold_slot(GrFoldEntry *entries, uint32_t capacity, const GrBlockKey *key)
{
	uint32_t	mask = capacity - 1;
	uint32_t	i = gr_block_key_hash(key) & mask;

	while (entries[i].used && !gr_block_key_equal(&entries[i].key, key))
		i = (i + 1) & mask;
	return &entries[i];
}

static bool
gr_fold_grow(GrFold *fold)
{
	uint32_t	capacity = fold->capacity * 2;
	GrFoldEntry *entries;
	uint32_t	i;

	if (capacity == 0)
		return false;
	entries = fold->alloc(fold->alloc_arg, sizeof(GrFoldEntry) * capacity);
	if (entries == NULL)
		return false;
	memset(entries, 0, sizeof(GrFoldEntry) * capacity);
	for (i = 0; i < fold->capacity; i++)
	{
		if (fold->entries[i].used)
			*gr_fold_slot(entries, capacity, &fold->entries[i].key) = fold->entries[i];
	}
	if (fold->free != NULL)
		fold->free(fold->alloc_arg, fold->entries);
	fold->entries = entries;
	fold->capacity = capacity;
	return true;
}

/*
 * One block reference at a record's LSN.  no_read says the reference
 * restores an image or initializes the page; it matters only for the
 * block's first reference.  Returns false when out of memory.
 */
bool
gr_fold_add(GrFold *fold, const GrBlockKey *key, uint64_t lsn, bool no_read)
{
	GrFoldEntry *entry;

	if (fold->distinct + 1 > GR_FOLD_MAX_FILL(fold->capacity) && !gr_fold_grow(fold))
		return false;

	fold->block_refs++;
	entry = gr_fold_slot(fold->entries, fold->capacity, key);
	if (entry->used)
	{
		entry->refs++;
		if (lsn > entry->last_lsn)
			entry->last_lsn = lsn;
		return true;
	}
	entry->used = true;
	entry->key = *key;
	entry->no_read = no_read;
	entry->refs = 1;
	entry->first_lsn = lsn;
	entry->last_lsn = lsn;
	fold->distinct++;
	if (!no_read)
		fold->reads_needed++;
	return true;
}

const GrFoldEntry *
gr_fold_lookup(const GrFold *fold, const GrBlockKey *key)
{
	GrFoldEntry *entry = gr_fold_slot(fold->entries, fold->capacity, key);

	return entry->used ? entry : NULL;
}

/* Would a reference to key add a read to the window? */
bool
gr_fold_would_read(const GrFold *fold, const GrBlockKey *key, bool no_read)
{
	return !no_read && gr_fold_lookup(fold, key) == NULL;
}

GrFoldFigures
gr_fold_figures(const GrFold *fold)
{
	GrFoldFigures f;

	f.block_refs = fold->block_refs;
	f.distinct_blocks = fold->distinct;
	f.reads_needed = fold->reads_needed;
	f.reads_avoided = fold->distinct - fold->reads_needed;
	f.fold_ratio = fold->distinct > 0 ?
		(double) fold->block_refs / (double) fold->distinct : 0.0;
	f.index_bytes = (uint64_t) sizeof(GrFoldEntry) * fold->capacity;
	f.bytes_per_block = fold->distinct > 0 ?
		(double) f.index_bytes / (double) fold->distinct : 0.0;
	return f;
}

/* Physical order: tablespace, database, relation, fork, block. */
int
gr_block_key_cmp(const GrBlockKey *a, const GrBlockKey *b)
{
	if (a->spc != b->spc)
		return a->spc < b->spc ? -1 : 1;
	if (a->db != b->db)
		return a->db < b->db ? -1 : 1;
	if (a->rel != b->rel)
		return a->rel < b->rel ? -1 : 1;
	if (a->fork != b->fork)
		return a->fork < b->fork ? -1 : 1;
	if (a->block != b->block)
		return a->block < b->block ? -1 : 1;
	return 0;
}

/* Is next the block right after prev in the same file? */
bool
gr_block_key_follows(const GrBlockKey *prev, const GrBlockKey *next)
{
	return prev->spc == next->spc && prev->db == next->db &&
		prev->rel == next->rel && prev->fork == next->fork &&
		prev->block != UINT32_MAX && prev->block + 1 == next->block;
}

static int
gr_block_key_qsort_cmp(const void *a, const void *b)
{
	return gr_block_key_cmp((const GrBlockKey *) a, (const GrBlockKey *) b);
}

/*
 * The blocks that need a read, in physical order, into out (room for
 * reads_needed keys).  Returns how many.
 */
uint64_t
gr_fold_collect_reads(const GrFold *fold, GrBlockKey *out)
{
	uint64_t	n = 0;
	uint32_t	i;

	for (i = 0; i < fold->capacity; i++)
	{
		if (fold->entries[i].used && !fold->entries[i].no_read)
			out[n++] = fold->entries[i].key;
	}
	qsort(out, n, sizeof(GrBlockKey), gr_block_key_qsort_cmp);
	return n;
}

/*
 * Every distinct block of the window, in physical order, into out (room
 * for fold->distinct keys).  Returns how many.
 */
uint64_t
gr_fold_collect_blocks(const GrFold *fold, GrBlockKey *out)
{
	uint64_t	n = 0;
	uint32_t	i;

	for (i = 0; i < fold->capacity; i++)
	{
		if (fold->entries[i].used)
			out[n++] = fold->entries[i].key;
	}
	qsort(out, n, sizeof(GrBlockKey), gr_block_key_qsort_cmp);
	return n;
}

GrRunFigures
gr_run_figures(const GrBlockKey *sorted, uint64_t n)
{
	GrRunFigures r;
	uint64_t	i;

	r.blocks = n;
	r.runs = 0;
	for (i = 0; i < n; i++)
	{
		if (i == 0 || !gr_block_key_follows(&sorted[i - 1], &sorted[i]))
			r.runs++;
	}
	r.sequential_share = n > 0 ? (double) (n - r.runs) / (double) n : 0.0;
	return r;
}

/*
 * Merge the sorted, distinct blocks of one file into read ranges: the next
 * block joins the current range when at most max_gap blocks lie between
 * them (reading through those is cheaper than a seek and a rotation; see
 * gr_break_even_gap()).  max_gap = 0 merges only adjacent blocks.  Returns
 * how many ranges were written to out (room for n).
 */
uint64_t
gr_merge_ranges(const GrBlockKey *sorted, uint64_t n, uint32_t max_gap,
				GrBlockRange *out)
{
	uint64_t	count = 0;
	uint64_t	i;

	for (i = 0; i < n; i++)
	{
		uint32_t	b = sorted[i].block;

		if (count > 0)
		{
			GrBlockRange *r = &out[count - 1];
			uint64_t	end = (uint64_t) r->first + r->nblocks;

			if (b >= end && (uint64_t) b - end <= max_gap)
			{
				r->nblocks = b - r->first + 1;
				r->needed++;
				continue;
			}
		}
		out[count].first = b;
		out[count].nblocks = 1;
		out[count].needed = 1;
		count++;
	}
	return count;
}

/*
 * The largest gap, in blocks, worth reading through rather than seeking
 * over: a gap of g blocks costs g block transfers, a reposition costs a seek
 * plus half a rotation on average.
 */
uint32_t
gr_break_even_gap(double reposition_ms, double block_transfer_ms)
{
	double		g;

	if (block_transfer_ms <= 0.0 || reposition_ms <= 0.0)
		return 0;
	g = reposition_ms / block_transfer_ms;
	return g >= (double) UINT32_MAX ? UINT32_MAX : (uint32_t) g;
}
