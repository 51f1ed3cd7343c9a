"""What Linux MD would issue for a block trace: member requests of RAID4/5/6 (left-symmetric)
and near-2 RAID10, to set beside the member I/O the agent's replay measures.

The model follows drivers/md/raid5.c handle_stripe_dirtying: per 4 KiB row of a stripe (a
stripe_head), read-modify-write pre-reads the old pages being written and the parity,
reconstruct-write pre-reads the data pages not being overwritten; MD takes read-modify-write
only when it pre-reads strictly fewer pages (a tie goes to reconstruct-write under the default
rmw_level, PARITY_ENABLE_RMW; RAID6 read-modify-write as in kernels since 4.1).  Pages of one
member contiguous within one user request are merged into one member request, as the block
layer would.  Assumed: a cold stripe cache (no page already up to date), no failed member,
page-aligned requests.
"""

PAGE = 4096
PARITY = {"raid10": 0, "raid5": 1, "raid6": 2}


def runs(extents):
    """Number of member requests once contiguous extents of one member are merged."""
    count = 0
    by_member = {}
    for m, start, end in extents:
        by_member.setdefault(m, []).append((start, end))
    for ivs in by_member.values():
        ivs.sort()
        cur_end = None
        for s, e in ivs:
            if cur_end is None or s > cur_end:
                count += 1
                cur_end = e
            else:
                cur_end = max(cur_end, e)
    return count


class MdModel:
    """Member requests Linux MD issues for a request (RAID4/5/6 left-symmetric, near-2
    RAID10), counted after merging contiguous pages of one member.  No stripe cache hits
    (every stripe is cold), no failed member, writes whole 4 KiB pages (the traces are
    page aligned)."""

    def __init__(self, layout, members, chunk):
        self.layout, self.n, self.chunk = layout, members, chunk
        self.p = PARITY[layout]
        self.d = members - self.p if layout != "raid10" else None
        self.rows = chunk // PAGE
        self.tally = {"user_reads": 0, "user_writes": 0, "member_reads": 0,
                      "member_writes": 0, "member_reads_for_user_reads": 0,
                      "rmw_rows": 0, "rcw_rows": 0, "full_rows": 0,
                      "read_pages": 0, "write_pages": 0}

    def parity_members(self, stripe):
        pd = self.n - 1 - stripe % self.n
        return [pd] if self.p == 1 else [pd, (pd + 1) % self.n]

    def data_member(self, stripe, index):
        pd = self.n - 1 - stripe % self.n
        return (pd + self.p + index) % self.n

    def pieces(self, offset, size):
        """(chunk number, offset in chunk, length) of a volume range."""
        end = offset + size
        while offset < end:
            c, within = divmod(offset, self.chunk)
            length = min(self.chunk - within, end - offset)
            yield c, within, length
            offset += length

    def add(self, kind, offset, size):
        t = self.tally
        if self.layout == "raid10":
            half = self.n // 2
            reads, writes = [], []
            for c, within, length in self.pieces(offset, size):
                row, pair = divmod(c, half)
                start = row * self.chunk + within
                copies = [2 * pair, 2 * pair + 1]
                if kind == "Read":
                    reads.append((copies[0], start, start + length))
                else:
                    writes += [(m, start, start + length) for m in copies]
            self._count(kind, reads, writes)
            return
        reads, writes = [], []
        if kind == "Read":
            for c, within, length in self.pieces(offset, size):
                stripe, index = divmod(c, self.d)
                m = self.data_member(stripe, index)
                reads.append((m, stripe * self.chunk + within,
                              stripe * self.chunk + within + length))
            self._count(kind, reads, writes)
            return
        # Writes: page rows of each stripe touched, MD's choice per row (one stripe_head).
        touched = {}
        for c, within, length in self.pieces(offset, size):
            stripe, index = divmod(c, self.d)
            for row in range(within // PAGE, (within + length + PAGE - 1) // PAGE):
                touched.setdefault((stripe, row), set()).add(index)
        for (stripe, row), written in touched.items():
            at = stripe * self.chunk + row * PAGE
            par = self.parity_members(stripe)
            w = len(written)
            rmw = w + self.p
            rcw = self.d - w
            if rcw == 0:
                t["full_rows"] += 1
                pre = []
            elif rmw < rcw:
                t["rmw_rows"] += 1
                pre = [self.data_member(stripe, i) for i in written] + par
            else:
                t["rcw_rows"] += 1
                pre = [self.data_member(stripe, i) for i in range(self.d) if i not in written]
            reads += [(m, at, at + PAGE) for m in pre]
            writes += [(self.data_member(stripe, i), at, at + PAGE) for i in written]
            writes += [(m, at, at + PAGE) for m in par]
        self._count(kind, reads, writes)

    def _count(self, kind, reads, writes):
        t = self.tally
        r, w = runs(reads), runs(writes)
        t["member_reads"] += r
        t["member_writes"] += w
        t["read_pages"] += sum((e - s) // PAGE for _, s, e in reads)
        t["write_pages"] += sum((e - s) // PAGE for _, s, e in writes)
        if kind == "Read":
            t["user_reads"] += 1
            t["member_reads_for_user_reads"] += r
        else:
            t["user_writes"] += 1


def md_model(trace, layout, members, chunk):
    model = MdModel(layout, members, chunk)
    with open(trace) as f:
        for line in f:
            fields = line.rstrip("\n").split(",")
            model.add(fields[3], int(fields[4]), int(fields[5]))
    t = model.tally
    writes = max(t["user_writes"], 1)
    t["reads_per_user_write"] = (t["member_reads"] - t["member_reads_for_user_reads"]) / writes
    t["writes_per_user_write"] = t["member_writes"] / writes
    return t


def textbook_small_write(layout, members):
    """The textbook cost of a write inside one chunk: MD's two ways, and its pick."""
    p = PARITY[layout]
    if p == 0:
        return {"reads": 0, "writes": 2, "way": "both copies"}
    d = members - p
    rmw = {"reads": 1 + p, "writes": 1 + p}
    rcw = {"reads": d - 1, "writes": 1 + p}
    pick = "rmw" if rmw["reads"] < rcw["reads"] else "rcw"
    return {"rmw": rmw, "rcw": rcw, "md_picks": pick}


def _self_check():
    """The textbook cases (python3 bench/raid/md_model.py): fails loudly if the model drifts."""
    def one(layout, n, offset, size, kind="Write", way=None):
        m = MdModel(layout, n, 65536)
        m.add(kind, offset, size)
        if way:
            assert m.tally[f"{way}_rows"] == (size + PAGE - 1) // PAGE, (layout, n, m.tally)
        return m.tally["member_reads"], m.tally["member_writes"]

    # RAID5 of 5: a 4 KiB write pre-reads old data and parity (rmw 2 < rcw 3).
    assert one("raid5", 5, 8192, 4096, way="rmw") == (2, 2)
    # RAID5 of 4: rmw 2 = rcw 2, MD's tie goes to reconstruct-write (2 other data pages).
    assert one("raid5", 4, 8192, 4096, way="rcw") == (2, 2)
    # RAID5 of 3: rcw reads the one other data page.
    assert one("raid5", 3, 8192, 4096, way="rcw") == (1, 2)
    # A whole-stripe write reads nothing and writes every member.
    assert one("raid5", 4, 0, 3 * 65536) == (0, 4)
    assert one("raid6", 6, 0, 4 * 65536) == (0, 6)
    # RAID6 of 6: rmw 3 = rcw 3 -> rcw; writes data, P and Q.
    assert one("raid6", 6, 4096, 4096, way="rcw") == (3, 3)
    # RAID6 of 8: rmw 3 < rcw 5.
    assert one("raid6", 8, 4096, 4096, way="rmw") == (3, 3)
    # A read of two chunks is two member reads; RAID10 writes both copies.
    assert one("raid5", 4, 60 * 1024, 8192, "Read") == (2, 0)
    assert one("raid10", 4, 0, 4096) == (0, 2)
    print("md_model: textbook cases hold")


if __name__ == "__main__":
    _self_check()
