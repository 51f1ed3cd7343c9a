#!/usr/bin/python3
"""Boundary-aware runs on a batch (issue 18, item 4): the same recorded window replayed by two
compacting standbys (os_cache PREFETCH) whose tablespaces sit on track-aligned RAID5 volumes
(raid5-tracks over Maxtor Atlas 10K V members), one with greenreplica.boundary_slack on (the
extension asks the agent for the volume's boundaries and cuts or extends its read ranges and hint
around them) and one with it at 0 (off); a stock_tuned standby on the same kind of volume for
scale (bench/compaction's machinery needs it).  Same WAL, same cold page cache per standby.

Reported per standby: batch seconds (request to flushed) and its phases, member requests
(reads and writes, from the agent's trace: every request each member served), volume requests
and how many of them cross a volume boundary (the agent cuts each such request into more member
requests; the boundaries come from the agent's "boundaries" op), bytes read, and the alignment
figures of the batch's log line.  Writes bench/results/tracks-batch.json and .png.  Run as root
with the extension installed (tools: /work/tools/privns.sh NAME bash -c 'make install && ...').
"""
import argparse
import bisect
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("compaction", ROOT / "bench" / "compaction" / "compaction.py")
compaction = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compaction)
energy, log = compaction.energy, compaction.log

ALIGNED, OFF = "compact_os", "compact_os_noalign"
MODES = ("stock_tuned", ALIGNED, OFF)
LAYOUT, MEMBERS = "raid5-tracks", 3

captured = {"agent": None, "rows": []}


def traced_volume(agent, name, profile, member_size, members=2):
    """compaction.traced_volume with the track-aligned layout and its members."""
    text = compaction_traced_volume(agent, name, profile, member_size, MEMBERS)
    return text.replace('layout = "raid10"', f'layout = "{LAYOUT}"', 1)


compaction_traced_volume = compaction.traced_volume
compaction.traced_volume = traced_volume


class Agent(energy.Agent):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        captured["agent"] = self


compaction.Agent = Agent
account_trace = compaction.account_trace


def account_and_keep(rows, extents):
    captured["rows"].append(rows)
    return account_trace(rows, extents)


compaction.account_trace = account_and_keep
compaction.GR_MODE[OFF] = "compact"
node_conf = energy.Node.conf


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--profile", default="maxtor-atlas-10k-v")
    p.add_argument("--scale", type=int, default=10)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--member-size", default="1GiB")
    p.add_argument("--record", type=int, default=20, help="seconds of pgbench that make the window")
    p.add_argument("--prefix", type=int, default=20, help="seconds of pgbench before it (mid-cycle)")
    p.add_argument("--shared-buffers", default="64MB")
    p.add_argument("--slack-kb", type=int, default=32, help="greenreplica.boundary_slack when on")
    p.add_argument("--merge-gap", type=int, default=None,
                   help="greenreplica.prefetch_merge_gap of both batching standbys (default: the "
                        "drive's break-even gap, as bench/compaction)")
    p.add_argument("--port-base", type=int, default=56700)
    p.add_argument("--out", default="tracks-batch")
    p.add_argument("--plot-only", action="store_true", help="only redraw the PNG of an earlier --out")
    args = p.parse_args()
    res = ROOT / "bench" / "results"
    if args.plot_only:
        plot(json.loads((res / f"{args.out}.json").read_text()), res / f"{args.out}.png")
        return 0

    def conf(self, text):
        if "primary_conninfo" in text and self.name in (ALIGNED, OFF):
            slack = args.slack_kb if self.name == ALIGNED else 0
            # the agent (for the boundaries and the hint); 1 ms per read assumed until the
            # batch measures it, so that the scheduler does not start a batch at once on the
            # default 20 ms while the window is being recorded (both standbys alike)
            text += (f"\ngreenreplica.boundary_slack = {slack}kB\n"
                     f"greenreplica.agent_socket = '{captured['agent'].socket}'\n"
                     f"greenreplica.agent_volume = '{self.name}'\n"
                     "greenreplica.initial_read_time = 1ms\n")
            if args.merge_gap is not None:
                text += f"greenreplica.prefetch_merge_gap = {args.merge_gap}\n"
        node_conf(self, text)

    energy.Node.conf = conf
    compaction.MODES = MODES
    cargs = argparse.Namespace(
        workload="pgbench", scale=args.scale, warehouses=0, clients=args.clients,
        member_size=args.member_size, evict="volume", fuse_threads=None, trace=True,
        record=args.record, shared_buffers=args.shared_buffers, window="mid", prefix=args.prefix,
        bgwriter_lru_maxpages=0, read_ahead_kb=128, windows=1, out=args.out)

    # The boundaries of each volume, fetched while the agent runs (at the trace accounting).
    bounds = {}

    def account_with_bounds(rows, extents):
        mode = MODES[len(captured["rows"])]
        agent = captured["agent"]
        offs = [r[2] + r[3] for r in rows if r[0] == 0] or [1]
        end, at, got = max(offs), 0, []
        while at < end:
            a = agent.request({"op": "boundaries", "volume": mode, "offset": at,
                               "len": min(end - at, 16 << 30)})
            got += a["boundaries"]
            if a["complete_to"] <= at:
                break
            at = a["complete_to"]
        bounds[mode] = got
        return account_and_keep(rows, extents)

    compaction.account_trace = account_with_bounds
    results = compaction.run_profile(cargs, args.profile, args.port_base)

    out = {"profile": args.profile, "layout": LAYOUT, "members": MEMBERS, "scale": args.scale,
           "record_s": args.record, "prefix_s": args.prefix, "shared_buffers": args.shared_buffers,
           "slack_kb": args.slack_kb, "merge_gap_override": args.merge_gap, "break_even_gap_blocks": results.get("break_even_gap_blocks"),
           "standbys": {}}
    logs = Path("/tmp") / f"greenreplica-compaction-logs-{args.out}-{args.profile}"
    for mode, rows in zip(MODES, captured["rows"]):
        r = results[mode]
        b = bounds.get(mode, [])
        vol = [x for x in rows if x[0] == 0]

        def crossing(x):
            i = bisect.bisect_right(b, x[2])
            return i < len(b) and b[i] < x[2] + x[3]

        member = [x for x in rows if x[0] > 0]
        s = {
            "wal_bytes": r["wal_bytes"],
            "batch_seconds": r["batch_seconds"],
            "phases": r.get("phases"),
            "member_requests": len(member),
            "member_reads": sum(1 for x in member if x[1] == "Read"),
            "member_writes": sum(1 for x in member if x[1] == "Write"),
            "volume_requests": len(vol),
            "volume_reads": sum(1 for x in vol if x[1] == "Read"),
            "volume_requests_crossing_a_boundary": sum(1 for x in vol if crossing(x)),
            "volume_reads_crossing_a_boundary": sum(1 for x in vol if x[1] == "Read" and crossing(x)),
            "volume_read_bytes": sum(x[3] for x in vol if x[1] == "Read"),
            "boundaries_known": len(b),
            "prefetch_ios": r.get("prefetch_ios"),
            "prefetch_bytes": r.get("prefetch_bytes"),
        }
        logf = logs / f"{mode}.log"
        if logf.exists():
            s["alignment_log"] = re.findall(r"prefetch aligned to .*", logf.read_text(errors="replace"))
        out["standbys"][mode] = s
        log(f"{mode}: {s}")

    (res / f"{args.out}.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(out, res / f"{args.out}.png")
    return 0


def plot(out, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = [m for m in (OFF, ALIGNED) if m in out["standbys"]]
    labels = {OFF: "boundary_slack = 0 (off)", ALIGNED: f"boundary_slack = {out['slack_kb']} kB"}
    fig, ax = plt.subplots(1, 3, figsize=(12, 4))
    for k, (key, title) in enumerate((("batch_seconds", "batch seconds"),
                                      ("member_requests", "member requests"),
                                      ("volume_requests_crossing_a_boundary", "volume requests crossing a boundary"))):
        vals = [out["standbys"][m][key] for m in modes]
        ax[k].bar([labels[m] for m in modes], vals, color=["#999999", "#3a7"])
        ax[k].set_title(title, fontsize=10)
        ax[k].tick_params(axis="x", labelsize=8)
        for i, v in enumerate(vals):
            ax[k].text(i, v, f"{v:.1f}" if isinstance(v, float) else str(v), ha="center", va="bottom", fontsize=8)
    fig.suptitle(f"One batch, same WAL: {out['layout']} of {out['members']} {out['profile']} members "
                 f"(pgbench scale {out['scale']}, {out['record_s']} s window, merge gap "
                 f"{out.get('merge_gap_override') or out['break_even_gap_blocks']} blocks, one run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
