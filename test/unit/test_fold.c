/*
 * Unit tests of the window's block set (src/gr_fold.c): folding a stream
 * of block references into distinct blocks, reads needed and avoided, the
 * physical sort and the run count.
 * Built and run by scripts/check.sh; prints "N passed, M failed".
 */
#include <stdio.h>
#include <stdlib.h>

#include "../../src/gr_fold.h"
#include "unit.h"

static size_t allocated;

static void *
test_alloc(void *arg, size_t size)
{
	(void) arg;
	allocated += size;
	return malloc(size);
}

static void
test_free(void *arg, void *ptr)
{
	(void) arg;
	free(ptr);
}

static GrBlockKey
key(uint32_t rel, int32_t fork, uint32_t block)
{
	GrBlockKey	k = {1663, 5, rel, fork, block};

	return k;
}

int
main(void)
{
	GrFold		fold;
	GrFoldFigures f;
	GrBlockKey	k;
	GrBlockKey *reads;
	GrRunFigures r;
	const GrFoldEntry *e;
	uint64_t	n;
	uint32_t	i;

	/* An empty window. */
	expect(gr_fold_init(&fold, 0, test_alloc, test_free, NULL), "init");
	f = gr_fold_figures(&fold);
	expect(f.block_refs == 0 && f.distinct_blocks == 0 && f.reads_needed == 0,
		   "an empty window has no figures");
	expect(f.fold_ratio == 0.0, "an empty window's fold ratio is 0");

	/* Many references to one block: one read. */
	k = key(100, 0, 7);
	for (i = 0; i < 10; i++)
		expect(gr_fold_add(&fold, &k, 1000 + i, false), "add");
	f = gr_fold_figures(&fold);
	expect(f.block_refs == 10, "10 block references");
	expect(f.distinct_blocks == 1, "folded to one block");
	expect(f.reads_needed == 1, "one read however many records touch it");
	expect(f.reads_avoided == 0, "no image came first");
	expect(f.fold_ratio == 10.0, "fold ratio 10");
	e = gr_fold_lookup(&fold, &k);
	expect(e != NULL && e->first_lsn == 1000 && e->last_lsn == 1009 && e->refs == 10,
		   "first and last LSN and references per block");

	/* An image first: no read, even if later references have none. */
	k = key(100, 0, 8);
	gr_fold_add(&fold, &k, 2000, true);
	gr_fold_add(&fold, &k, 2001, false);
	f = gr_fold_figures(&fold);
	expect(f.distinct_blocks == 2 && f.reads_needed == 1 && f.reads_avoided == 1,
		   "a block whose first reference is an image or init needs no read");

	/* An image after a plain reference does not avoid the read. */
	k = key(100, 0, 9);
	gr_fold_add(&fold, &k, 3000, false);
	gr_fold_add(&fold, &k, 3001, true);
	f = gr_fold_figures(&fold);
	expect(f.reads_needed == 2 && f.reads_avoided == 1,
		   "only the first reference decides");
	expect(gr_fold_would_read(&fold, &k, false) == 0, "a known block adds no read");
	k = key(100, 0, 10);
	expect(gr_fold_would_read(&fold, &k, false) == 1, "a new block adds a read");
	expect(gr_fold_would_read(&fold, &k, true) == 0, "a new imaged block adds no read");

	/* Forks and relations are distinct blocks. */
	k = key(100, 2, 7);
	gr_fold_add(&fold, &k, 4000, false);
	k = key(101, 0, 7);
	gr_fold_add(&fold, &k, 4001, false);
	f = gr_fold_figures(&fold);
	expect(f.distinct_blocks == 5 && f.reads_needed == 4, "fork and relation are in the key");
	gr_fold_destroy(&fold);

	/* Growth keeps every block; sorting puts them in physical order. */
	allocated = 0;
	expect(gr_fold_init(&fold, 16, test_alloc, test_free, NULL), "init small");
	for (i = 0; i < 5000; i++)
	{
		/* rel 200: blocks 0..2499 in reverse; rel 199: even blocks */
		k = key(200, 0, 2499 - (i % 2500));
		gr_fold_add(&fold, &k, i, false);
		k = key(199, 0, 2 * i);
		gr_fold_add(&fold, &k, i, i % 10 == 0);
	}
	f = gr_fold_figures(&fold);
	expect(f.block_refs == 10000, "10000 references");
	expect(f.distinct_blocks == 7500, "7500 distinct blocks after growth");
	expect(f.reads_needed == 7000 && f.reads_avoided == 500, "500 imaged blocks avoid reads");
	expect(f.bytes_per_block > 0 && f.bytes_per_block < 4 * sizeof(GrFoldEntry),
		   "memory per block is bounded");
	expect(f.index_bytes == (uint64_t) (f.bytes_per_block * f.distinct_blocks + 0.5),
		   "index memory is what the table holds");
	reads = malloc(sizeof(GrBlockKey) * f.reads_needed);
	n = gr_fold_collect_reads(&fold, reads);
	expect(n == 7000, "collect the blocks that need a read");
	{
		int			sorted = 1;

		for (i = 1; i < n; i++)
			if (gr_block_key_cmp(&reads[i - 1], &reads[i]) >= 0)
				sorted = 0;
		expect(sorted, "reads sorted by (tablespace, db, relation, fork, block)");
	}
	expect(reads[0].rel == 199 && reads[0].block == 2, "first read: rel 199 block 2");
	r = gr_run_figures(reads, n);
	/* rel 199: 4500 isolated blocks; rel 200: one run of 2500 */
	expect(r.blocks == 7000 && r.runs == 4501, "runs: isolated blocks and one long run");
	expect(r.sequential_share > 0.35 && r.sequential_share < 0.36, "sequential share");
	free(reads);

	/* Every distinct block, imaged or not, for the write-back's extents. */
	reads = malloc(sizeof(GrBlockKey) * f.distinct_blocks);
	n = gr_fold_collect_blocks(&fold, reads);
	expect(n == 7500, "collect every distinct block");
	expect(reads[0].rel == 199 && reads[0].block == 0,
		   "the imaged blocks are among them: rel 199 block 0 first");
	{
		int			sorted = 1;

		for (i = 1; i < n; i++)
			if (gr_block_key_cmp(&reads[i - 1], &reads[i]) >= 0)
				sorted = 0;
		expect(sorted, "every block sorted in physical order");
	}
	free(reads);
	gr_fold_destroy(&fold);

	/* Runs do not cross files. */
	{
		GrBlockKey	s[4] = {{1, 1, 1, 0, 5}, {1, 1, 1, 0, 6}, {1, 1, 1, 1, 7}, {1, 1, 2, 1, 8}};

		r = gr_run_figures(s, 4);
		expect(r.runs == 3, "a run ends where the fork or relation changes");
		r = gr_run_figures(s, 0);
		expect(r.runs == 0 && r.sequential_share == 0.0, "no blocks, no runs");
	}

	/* Read ranges: merged across gaps up to max_gap blocks, never across a larger one. */
	{
		GrBlockKey	s[6] = {{1, 1, 1, 0, 0}, {1, 1, 1, 0, 1}, {1, 1, 1, 0, 4},
		{1, 1, 1, 0, 9}, {1, 1, 1, 0, 10}, {1, 1, 1, 0, 30}};
		GrBlockRange out[6];
		uint64_t	nr;

		nr = gr_merge_ranges(s, 6, 0, out);
		expect(nr == 4, "gap 0: only adjacent blocks merge");
		expect(out[0].first == 0 && out[0].nblocks == 2 && out[0].needed == 2,
			   "gap 0: first range is blocks 0-1");
		nr = gr_merge_ranges(s, 6, 4, out);
		expect(nr == 2, "gap 4: 0-1, 4 and 9-10 merge; 30 stays apart");
		expect(out[0].first == 0 && out[0].nblocks == 11 && out[0].needed == 5,
			   "gap 4: one range of 11 blocks holding the 5 needed");
		expect(out[1].first == 30 && out[1].nblocks == 1 && out[1].needed == 1,
			   "gap 4: block 30 alone");
		nr = gr_merge_ranges(s, 6, 3, out);
		expect(nr == 3 && out[0].nblocks == 5 && out[1].first == 9,
			   "gap 3: a gap of exactly 3 blocks merges, one of 4 does not");
		nr = gr_merge_ranges(s, 6, UINT32_MAX, out);
		expect(nr == 1 && out[0].nblocks == 31 && out[0].needed == 6,
			   "an unbounded gap gives one range");
		expect(gr_merge_ranges(s, 0, 8, out) == 0, "no blocks, no ranges");
	}

	/* Break-even gap: 12.7 ms of reposition over 0.125 ms per block. */
	expect(gr_break_even_gap(12.7, 0.125) == 101, "break-even gap of a 7200 rpm drive");
	expect(gr_break_even_gap(12.7, 0.0) == 0, "no transfer time, no gap");
	expect(gr_break_even_gap(0.0, 0.1) == 0, "no reposition time, no gap");

	return unit_report();
}
