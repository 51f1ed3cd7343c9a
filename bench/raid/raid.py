#!/usr/bin/python3
"""RAID5 and RAID6 against RAID10 in replay (virtual time), and replay speed.

Part 1, the grid: synthetic block traces shaped like MSR Cambridge traces (the write ratio,
IOPS and mean request size of Table 6 of the RoLo paper; the other knobs are ours and are
written into the JSON) are replayed by `greenreplica-storage replay` through RAID10, RAID5
and RAID6 volumes of the same number of members, per drive profile and power policy.
Reported per run: energy, mean/p99 response time, member reads and writes.  Beside every
parity run stands what Linux MD would issue for the same trace: a model of MD's
handle_stripe_dirtying (per 4 KiB row of a stripe, read-modify-write when it pre-reads
strictly fewer pages than reconstruct-write, a tie goes to reconstruct-write as with MD's
default rmw_level), its pages merged into one member request per contiguous run, as the
block layer would.

Part 2, replay speed: a trace of 1 M requests replayed once per layout by the binary of this
tree and by a "before" binary (default: none; pass --before-bin, e.g. a release build of
/work/main), wall and CPU seconds.  The issue asks for < 60 s per 1 M requests.

Writes bench/results/raid.json and raid.png.  Runs niced; needs a release build
(cargo build --release in contrib-storage).
"""
import argparse
import datetime
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "contrib-storage" / "target" / "release" / "greenreplica-storage"
PAGE = 4096

# Table 6 of the RoLo paper (write ratio, IOPS, average request size, data amount).  The
# request size is rounded to whole 4 KiB pages (the synthesizer uses one size); sequential
# share and diurnal swing are not published: ours.
TRACES = {
    "proj_0": {
        "published": {"write_ratio": 0.949, "iops": 23.89, "avg_request_kb": 51.42,
                      "data_amount": "99.3 GB"},
        "synth": {"write_ratio": 0.949, "iops": 23.89, "request_bytes": 13 * PAGE,
                  "volume_bytes": 99_300_000_000, "sequential": 0.3, "diurnal": 0.5},
        "requests": 200_000, "character": "write-dominated",
    },
    "web_1": {
        "published": {"write_ratio": 0.459, "iops": 0.27, "avg_request_kb": 29.07,
                      "data_amount": "664 MB"},
        "synth": {"write_ratio": 0.459, "iops": 0.27, "request_bytes": 7 * PAGE,
                  "volume_bytes": 664_000_000, "sequential": 0.3, "diurnal": 0.5},
        "requests": 40_000, "character": "mixed, slightly read-leaning",
    },
    "hm_1": {
        "published": {"write_ratio": 0.047, "iops": 1.02, "avg_request_kb": 15.16,
                      "data_amount": "553 MB"},
        "synth": {"write_ratio": 0.047, "iops": 1.02, "request_bytes": 4 * PAGE,
                  "volume_bytes": 553_000_000, "sequential": 0.3, "diurnal": 0.5},
        "requests": 100_000, "character": "read-dominated",
    },
}
LAYOUTS = ("raid10", "raid5", "raid6")
PROFILES = ("seagate-st1000nm0011", "deskstar-t7k250")
PARITY = {"raid10": 0, "raid5": 1, "raid6": 2}


def log(msg):
    print(f"raid: {msg}", file=sys.stderr, flush=True)


def run(args, **kw):
    return subprocess.run(["nice", "-n", "10", *map(str, args)], check=True,
                          capture_output=True, text=True, **kw)


def synth(binary, path, requests, o, seed=1):
    with open(path, "w") as f:
        subprocess.run(["nice", "-n", "10", str(binary), "synth-trace",
                        "--requests", str(requests), "--iops", str(o["iops"]),
                        "--write-ratio", str(o["write_ratio"]),
                        "--request-bytes", str(o["request_bytes"]),
                        "--volume-bytes", str(o["volume_bytes"]),
                        "--sequential", str(o["sequential"]), "--diurnal", str(o["diurnal"]),
                        "--seed", str(seed)], check=True, stdout=f)


def replay(binary, trace, layout, members, chunk, profile, policy):
    """One replay; returns (report, wall seconds, CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = run([binary, "replay", "--trace", trace, "--layout", layout, "--members", members,
               "--stripe-unit", chunk, "--profile", profile, "--policy", policy])
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out.stdout), wall, cpu


# ---- what Linux MD would issue -------------------------------------------------------------

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


# ---- the benchmark -------------------------------------------------------------------------

def grid(args, work):
    results = []
    models = {}
    trace_meta = {}
    for name in args.traces:
        spec = TRACES[name]
        requests = int(spec["requests"] * args.scale)
        path = work / f"{name}.csv"
        synth(BIN, path, requests, spec["synth"])
        trace_meta[name] = {**spec, "requests": requests}
        log(f"{name}: {requests} requests")
        for layout in LAYOUTS:
            models[(name, layout)] = md_model(path, layout, args.members, args.chunk)
            for profile in args.profiles:
                policies = ["always-on"]
                for policy in policies:
                    rep, wall, cpu = replay(BIN, path, layout, args.members, args.chunk,
                                            profile, policy)
                    if policy == "always-on":
                        # The idle timeout is the break-even time of the profile's default
                        # standby mode (the 2-competitive choice), as the replay reports it.
                        policies.append(f"idle-timeout:{max(1, math.ceil(rep['break_even_s']))}")
                    m = models[(name, layout)]
                    user_reads = m["user_reads"]
                    user_writes = max(m["user_writes"], 1)
                    reads_for_writes = rep["reads"] - m["member_reads_for_user_reads"]
                    row = {
                        "trace": name, "layout": layout, "profile": profile, "policy": policy,
                        "requests": rep["requests"], "duration_s": rep["duration_s"],
                        "energy_j": rep["energy_joules"],
                        "mean_power_w": rep["energy_joules"] / rep["duration_s"],
                        "response_ms": rep["response_ms"],
                        "spin_ups": rep["spin_ups"], "spin_downs": rep["spin_downs"],
                        "member_reads": rep["reads"], "member_writes": rep["writes"],
                        "user_reads": user_reads, "user_writes": m["user_writes"],
                        "member_reads_per_user_write": reads_for_writes / user_writes,
                        "member_writes_per_user_write": rep["writes"] / user_writes,
                        "per_member": [{"reads": x["reads"], "writes": x["writes"],
                                        "energy_j": x["energy_joules"],
                                        "spin_ups": x["spin_ups"]} for x in rep["members"]],
                        "replay_wall_s": wall, "replay_cpu_s": cpu,
                    }
                    results.append(row)
                    log(f"{name} {layout} {profile} {policy}: {row['energy_j']:.0f} J, "
                        f"mean {row['response_ms']['mean']:.2f} ms, "
                        f"p99 {row['response_ms']['p99']:.2f} ms, "
                        f"reads {row['member_reads']} writes {row['member_writes']}")
        path.unlink()
    md = [{"trace": t, "layout": l, **v} for (t, l), v in models.items()]
    return trace_meta, results, md


def speed(args, work):
    path = work / "speed.csv"
    spec = TRACES["proj_0"]["synth"]
    synth(BIN, path, args.speed_requests, spec)
    out = []
    binaries = [("this tree", BIN)] + ([("before", Path(args.before_bin))]
                                       if args.before_bin else [])
    for label, binary in binaries:
        for layout in ("single",) + LAYOUTS:
            members = 1 if layout == "single" else args.members
            row = {"binary": label, "path": str(binary), "layout": layout, "members": members,
                   "requests": args.speed_requests,
                   "load_average_before": os.getloadavg()[0]}
            try:
                rep, wall, cpu = replay(binary, path, layout, members, args.chunk,
                                        "seagate-st1000nm0011", "always-on")
                row.update(wall_s=wall, cpu_s=cpu, requests_replayed=rep["requests"],
                           requests_per_s_wall=rep["requests"] / wall,
                           requests_per_s_cpu=rep["requests"] / cpu,
                           under_60_s=wall < 60)
                log(f"speed {label} {layout}: {wall:.1f} s wall, {cpu:.1f} s CPU, "
                    f"{rep['requests'] / wall:.0f} requests/s")
            except subprocess.CalledProcessError as e:
                row["error"] = e.stderr.strip().splitlines()[0] if e.stderr else str(e)
                log(f"speed {label} {layout}: {row['error']}")
            out.append(row)
    path.unlink()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "raid.json"))
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--traces", nargs="+", default=list(TRACES), choices=list(TRACES))
    ap.add_argument("--profiles", nargs="+", default=list(PROFILES))
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every trace's request count (0.05 for a quick look)")
    ap.add_argument("--speed-requests", type=int, default=1_000_000)
    ap.add_argument("--before-bin", help="a binary of before the change, for replay speed")
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"raid: {BIN} is missing: cargo build --release in contrib-storage")

    with tempfile.TemporaryDirectory(prefix="grs-raid-") as tmp:
        work = Path(tmp)
        trace_meta, results, md = grid(args, work)
        speeds = [] if args.skip_speed else speed(args, work)
    n = args.members
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip(),
        "cpus": os.cpu_count(),
        "members": n, "chunk_bytes": args.chunk,
        "usable_capacity_members": {"raid10": n // 2, "raid5": n - 1, "raid6": n - 2},
        "setup": ("greenreplica-storage replay (virtual time) of synthetic MSR-format traces, "
                  f"{n} members per layout, chunk (stripe unit) {args.chunk} B; policies "
                  "always-on and idle-timeout at the profile's break-even time; every "
                  "figure from one run; md_model: member requests Linux MD would issue for "
                  "the same trace (per 4 KiB row, rmw if strictly fewer pre-reads else rcw, "
                  "contiguous pages of a member merged into one request, cold stripe cache)"),
        "traces": trace_meta,
        "textbook_small_write": {l: textbook_small_write(l, n) for l in LAYOUTS},
        "runs": results,
        "md_model": md,
        "replay_speed": speeds,
    }
    out = Path(args.out)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {out}")
    subprocess.run(["/usr/bin/python3", str(Path(__file__).with_name("plot.py")), str(out)],
                   check=True)


if __name__ == "__main__":
    main()
