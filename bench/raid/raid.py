#!/usr/bin/python3
"""RAID benchmark (not a test): RAID5 and RAID6 against RAID10 in replay, and replay speed.

Every layout gets the same usable capacity (two drives' worth: RAID10 on 4 members, RAID5 on
3, RAID6 on 4) of the same drive profile and replays the same synthetic trace
(`greenreplica-storage synth-trace`) under the same power policy in virtual time
(`greenreplica-storage replay`, the event core). Reported per layout: energy, spin-ups,
response time (mean, p95, p99), member reads and writes (the parity layouts' extra I/O).
Replay speed: wall-clock seconds and requests per second for a 1 M-request trace, for this
build and, with --baseline-bin, for a build from before the event core.

The MSR-like grid (`msr_grid` in the JSON, raid-grid.png): the same number of members for
every layout (4 by default: usable capacity RAID10 2 members, RAID5 3, RAID6 2), synthetic
traces with the write ratio, IOPS and mean request size of MSR Cambridge traces (RoLo paper,
Table 6: proj_0 write-dominated, web_1 mixed, hm_1 read-dominated), two drive profiles,
always-on and idle-timeout at the profile's break-even time; per run energy, response time,
member reads and writes per user write, beside what Linux MD would issue for the same trace
(md_model.py: per-row read-modify-write or reconstruct-write, merged runs).
Writes bench/results/raid.json, raid.png and raid-grid.png.  Runs as any user, in a few
minutes; niced.

  /usr/bin/python3 bench/raid/raid.py [--bin PATH] [--baseline-bin PATH] [--profile NAME]
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

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import md_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
LAYOUTS = [("raid10", 4), ("raid5", 3), ("raid6", 4)]
PAGE = md_model.PAGE

# MSR Cambridge traces as Table 6 of the RoLo paper characterises them (write ratio, IOPS,
# average request size, data amount).  The request size is rounded to whole 4 KiB pages (the
# synthesizer uses one size); the sequential share and diurnal swing are not published: ours.
MSR_TRACES = {
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
        "requests": 40_000, "character": "mixed (54 % reads)",
    },
    "hm_1": {
        "published": {"write_ratio": 0.047, "iops": 1.02, "avg_request_kb": 15.16,
                      "data_amount": "553 MB"},
        "synth": {"write_ratio": 0.047, "iops": 1.02, "request_bytes": 4 * PAGE,
                  "volume_bytes": 553_000_000, "sequential": 0.3, "diurnal": 0.5},
        "requests": 100_000, "character": "read-dominated",
    },
}
GRID_LAYOUTS = ("raid10", "raid5", "raid6")


def nice(cmd):
    """Every child runs niced: the machine is shared."""
    return ["nice", "-n", "10", *map(str, cmd)]


def synth(binary, path, requests, iops, seed):
    with open(path, "w") as out:
        subprocess.run(nice([binary, "synth-trace", "--requests", str(requests),
                             "--iops", str(iops), "--volume-bytes", str(100_000_000_000),
                             "--seed", str(seed)]),
                       check=True, stdout=out)


def replay(binary, trace, profile, policy, layout, members, extra=()):
    started = time.monotonic()
    out = subprocess.run(nice([binary, "replay", "--trace", str(trace), "--profile", profile,
                               "--policy", policy, "--layout", layout, "--members", str(members),
                               "--disk", "0", *extra]),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out), time.monotonic() - started


def summary(report):
    members = report["members"]
    # A member is in one power state at a time: its state seconds should add up to the
    # replay's duration.  More means the ledger counted some time twice (energy too high).
    state_s = [sum(m["state_seconds"].values()) for m in members]
    return {
        "member_state_seconds": state_s,
        "ledger_overcount": max(state_s) / report["duration_s"] - 1 if report["duration_s"] else 0,
        "energy_kj": report["energy_joules"] / 1e3,
        "spin_ups": report["spin_ups"],
        "response_ms": report["response_ms"],
        "member_reads": sum(m["reads"] for m in members),
        "member_writes": sum(m["writes"] for m in members),
        "requests": report["requests"],
        "requests_wrapped": report["requests_wrapped"],
        "duration_s": report["duration_s"],
    }


def synth_msr(binary, path, requests, o, seed=1):
    with open(path, "w") as out:
        subprocess.run(nice([binary, "synth-trace", "--requests", requests,
                             "--iops", o["iops"], "--write-ratio", o["write_ratio"],
                             "--request-bytes", o["request_bytes"],
                             "--volume-bytes", o["volume_bytes"],
                             "--sequential", o["sequential"], "--diurnal", o["diurnal"],
                             "--seed", seed]),
                       check=True, stdout=out)


def msr_grid(args, tmp):
    """RAID10, RAID5 and RAID6 of the same member count on MSR-like traces, per profile and
    policy, with Linux MD's expected member I/O for the same trace beside each layout."""
    n, chunk = args.grid_members, args.chunk
    runs, models, traces = [], [], {}
    for name in args.grid_traces:
        spec = MSR_TRACES[name]
        requests = max(1, int(spec["requests"] * args.grid_scale))
        path = Path(tmp) / f"{name}.csv"
        synth_msr(args.bin, path, requests, spec["synth"])
        traces[name] = {**spec, "requests": requests}
        for layout in GRID_LAYOUTS:
            md = md_model.md_model(path, layout, n, chunk)
            models.append({"trace": name, "layout": layout, **md})
            user_writes = max(md["user_writes"], 1)
            for profile in args.grid_profiles:
                policies = ["always-on"]
                for policy in policies:
                    report, _ = replay(args.bin, path, profile, policy, layout, n,
                                       ["--stripe-unit", str(chunk)])
                    if policy == "always-on":
                        # The idle timeout is the break-even time of the profile's default
                        # standby mode (the 2-competitive choice), as replay reports it.
                        policies.append(
                            f"idle-timeout:{max(1, math.ceil(report['break_even_s']))}")
                    row = summary(report) | {
                        "trace": name, "layout": layout, "members": n, "profile": profile,
                        "policy": policy, "energy_j": report["energy_joules"],
                        "mean_power_w": report["energy_joules"] / report["duration_s"],
                        "spin_downs": report["spin_downs"],
                        "user_reads": md["user_reads"], "user_writes": md["user_writes"]}
                    # Member reads that serve user reads are the same pieces on every
                    # layout (one per chunk touched); the rest are the writes' pre-reads.
                    row["member_reads_per_user_write"] = (
                        row["member_reads"] - md["member_reads_for_user_reads"]) / user_writes
                    row["member_writes_per_user_write"] = row["member_writes"] / user_writes
                    if args.grid_reference_bin:
                        # The same run on a build of the parity layouts from before the
                        # event core (synchronous replay), to set its ledger beside this one.
                        ref, _ = replay(args.grid_reference_bin, path, profile, policy, layout,
                                        n, ["--stripe-unit", str(chunk)])
                        row["reference_build"] = summary(ref) | {
                            "energy_j": ref["energy_joules"]}
                    runs.append(row)
                    print(f"{name} {layout}/{n} {profile} {policy}: "
                          f"{row['energy_kj']:.1f} kJ, mean {row['response_ms']['mean']:.2f} ms, "
                          f"p99 {row['response_ms']['p99']:.2f} ms, reads/write "
                          f"{row['member_reads_per_user_write']:.2f} (MD "
                          f"{md['reads_per_user_write']:.2f}), writes/write "
                          f"{row['member_writes_per_user_write']:.2f} (MD "
                          f"{md['writes_per_user_write']:.2f}), ledger overcount "
                          f"{row['ledger_overcount']:.3f}", flush=True)
        path.unlink()
    return {
        "setup": (f"replay (virtual time, the event core, each profile's own queue depth and "
                  f"scheduler) of synthetic MSR-like traces; {n} members for every layout, "
                  f"chunk {chunk} B; usable capacity in members: RAID10 {n // 2}, RAID5 "
                  f"{n - 1}, RAID6 {n - 2}; policies always-on and idle-timeout at the "
                  "profile's break-even time; md_model: member requests Linux MD would issue "
                  "for the same trace (md_model.py)"),
        "members": n, "chunk_bytes": chunk,
        "usable_capacity_members": {"raid10": n // 2, "raid5": n - 1, "raid6": n - 2},
        "traces": traces,
        "textbook_small_write": {l: md_model.textbook_small_write(l, n) for l in GRID_LAYOUTS},
        "reference_build": args.grid_reference_bin,
        "runs": runs,
        "md_model": models,
    }


def plot_grid(grid, out):
    runs = grid["runs"]
    colors = {"raid10": "#4c72b0", "raid5": "#dd8452", "raid6": "#55a868"}
    traces = list(grid["traces"])
    profiles = list(dict.fromkeys(r["profile"] for r in runs))
    policies = list(dict.fromkeys(r["policy"] for r in runs))

    def find(t, pr, po, lay):
        return next((r for r in runs if (r["trace"], r["profile"], r["layout"]) == (t, pr, lay)
                     and r["policy"].split(":")[0] == po), None)

    cases = [(t, pr, po) for t in traces for pr in profiles
             for po in ("always-on", "idle-timeout")]
    labels = [f"{t}\n{pr.split('-')[0]}\n{po.replace('-timeout', '')}" for t, pr, po in cases]
    fig, axes = plt.subplots(4, 1, figsize=(13, 15))
    width = 0.27
    has_ref = any("reference_build" in r for r in runs)
    for k, lay in enumerate(GRID_LAYOUTS):
        xs = [i + (k - 1) * width for i in range(len(cases))]
        rel, rel_ref, mean, p99 = [], [], [], []
        for t, pr, po in cases:
            r, base = find(t, pr, po, lay), find(t, pr, po, "raid10")
            rel.append(r["energy_j"] / base["energy_j"] if r and base else 0)
            rel_ref.append(r["reference_build"]["energy_j"] / base["reference_build"]["energy_j"]
                           if has_ref and r and base else 0)
            mean.append(r["response_ms"]["mean"] if r else 0)
            p99.append(r["response_ms"]["p99"] if r else 0)
        if has_ref:
            half = width / 2
            axes[0].bar([x - half / 2 for x in xs], rel, half, label=f"{lay} (this build)",
                        color=colors[lay])
            axes[0].bar([x + half / 2 for x in xs], rel_ref, half, color=colors[lay],
                        alpha=0.45, hatch="//", label=f"{lay} (reference build)")
        else:
            axes[0].bar(xs, rel, width, label=lay, color=colors[lay])
        axes[1].bar(xs, mean, width, label=lay, color=colors[lay])
        axes[2].bar(xs, p99, width, label=lay, color=colors[lay])
    axes[0].axhline(1.0, color="grey", linewidth=0.8)
    axes[0].set_ylabel("energy / RAID10's")
    axes[1].set_ylabel("mean response (ms)")
    axes[2].set_ylabel("p99 response (ms)")
    for ax in axes[1:3]:
        ax.set_yscale("log")
    for ax in axes[:3]:
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.legend(fontsize=8)
    md = {(m["trace"], m["layout"]): m for m in grid["md_model"]}
    groups = [(t, lay) for t in traces for lay in GRID_LAYOUTS]
    bars = [("engine: reads / user write", "#dd8452",
             lambda t, l: find(t, profiles[0], "always-on", l)["member_reads_per_user_write"]),
            ("Linux MD model: reads / user write", "#f3c19d",
             lambda t, l: md[(t, l)]["reads_per_user_write"]),
            ("engine: writes / user write", "#4c72b0",
             lambda t, l: find(t, profiles[0], "always-on", l)["member_writes_per_user_write"]),
            ("Linux MD model: writes / user write", "#a8bfe0",
             lambda t, l: md[(t, l)]["writes_per_user_write"])]
    w = 0.2
    for k, (label, color, value) in enumerate(bars):
        axes[3].bar([i + (k - 1.5) * w for i in range(len(groups))],
                    [value(t, l) for t, l in groups], w, label=label, color=color)
    axes[3].set_xticks(range(len(groups)))
    axes[3].set_xticklabels([f"{t}\n{l}" for t, l in groups], fontsize=8)
    axes[3].set_ylabel("member requests per user write")
    axes[3].legend(fontsize=8)
    usable = ", ".join(f"{k} {v}" for k, v in grid["usable_capacity_members"].items())
    fig.suptitle(f"RAID10 vs RAID5 vs RAID6 in replay, {grid['members']} members each, chunk "
                 f"{grid['chunk_bytes'] // 1024} KiB, one run each; usable members: {usable}\n"
                 f"policies: {', '.join(policies)}")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage/target/release/greenreplica-storage"))
    ap.add_argument("--baseline-bin", help="a build from before the event core, for replay speed")
    ap.add_argument("--profile", default="deskstar-t7k250")
    ap.add_argument("--policy", default="idle-timeout:60")
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--iops", type=float, default=5.0)
    ap.add_argument("--speed-requests", type=int, default=1_000_000)
    ap.add_argument("--speed-profiles", nargs="+", default=["test-fast", "seagate-st1000nm0011"],
                    help="replay speed per profile (test-fast keeps the first table's keys)")
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--grid-members", type=int, default=4)
    ap.add_argument("--grid-traces", nargs="+", default=list(MSR_TRACES),
                    choices=list(MSR_TRACES))
    ap.add_argument("--grid-profiles", nargs="+",
                    default=["seagate-st1000nm0011", "deskstar-t7k250"])
    ap.add_argument("--grid-scale", type=float, default=1.0,
                    help="multiply the MSR-like traces' request counts (0.02 for a quick look)")
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--grid-reference-bin",
                    help="also run the grid on this build (e.g. the parity layouts before "
                         "the event core) and keep its figures beside each run")
    args = ap.parse_args()

    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "profile": args.profile, "policy": args.policy, "requests": args.requests,
              "iops": args.iops, "layouts": {}, "replay_speed": {}}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        synth(args.bin, trace, args.requests, args.iops, 7)
        for layout, members in LAYOUTS:
            for depth, scheduler in [(1, "fcfs"), (8, "sptf")]:
                report, _ = replay(args.bin, trace, args.profile, args.policy, layout, members,
                                   ["--queue-depth", str(depth), "--scheduler", scheduler])
                key = f"{layout}/{members} qd{depth} {scheduler}"
                result["layouts"][key] = summary(report) | {"layout": layout, "members": members,
                                                            "queue_depth": depth,
                                                            "scheduler": scheduler}
                print(key, json.dumps(result["layouts"][key]["response_ms"]),
                      f'{result["layouts"][key]["energy_kj"]:.1f} kJ', flush=True)
        if not args.skip_grid:
            result["msr_grid"] = msr_grid(args, tmp)
        speed_trace = Path(tmp) / "speed.csv"
        synth(args.bin, speed_trace, args.speed_requests, 20.0, 3)
        builds = [("event core", args.bin)]
        if args.baseline_bin:
            builds.append(("before the event core", args.baseline_bin))
        for profile in args.speed_profiles:
            for name, binary in builds:
                for layout, members in LAYOUTS:
                    if name != "event core" and layout != "raid10":
                        continue  # the old build has no parity layouts
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    load = os.getloadavg()[0]
                    report, seconds = replay(binary, speed_trace, profile, "always-on", layout,
                                             members)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                    key = f"{name}: {layout}/{members}"
                    if profile != "test-fast":
                        key += f" {profile}"
                    result["replay_speed"][key] = {
                        "profile": profile, "requests": report["requests"], "seconds": seconds,
                        "cpu_seconds": cpu, "load_average_1m_before": load,
                        "requests_per_s": report["requests"] / seconds,
                        "requests_per_cpu_s": report["requests"] / cpu,
                        "energy_kj": report["energy_joules"] / 1e3,
                        "mean_response_ms": report["response_ms"]["mean"]}
                    print(key, f"{seconds:.2f} s wall, {cpu:.2f} s CPU",
                          f'{report["requests"] / seconds:,.0f} req/s', flush=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "raid.json").write_text(json.dumps(result, indent=2) + "\n")

    keys = list(result["layouts"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    labels = [k.replace(" ", "\n", 1) for k in keys]
    axes[0].bar(labels, [result["layouts"][k]["energy_kj"] for k in keys], color="tab:green")
    axes[0].set_ylabel("energy (kJ)")
    axes[0].set_title(f"energy, {args.profile}, {args.policy}")
    for q, style in [("mean", "o"), ("p95", "s"), ("p99", "^")]:
        axes[1].plot(labels, [result["layouts"][k]["response_ms"][q] for k in keys], style,
                     label=q)
    axes[1].set_ylabel("response time (ms)")
    axes[1].set_title("response time")
    axes[1].legend()
    speed = result["replay_speed"]
    axes[2].barh(list(speed), [v["requests_per_s"] for v in speed.values()], color="tab:blue")
    axes[2].set_xlabel("requests per second (replay, 1 M requests)")
    axes[2].set_title("replay speed")
    for ax in axes[:2]:
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "raid.png", dpi=110)
    print("wrote", RESULTS / "raid.json", "and", RESULTS / "raid.png")
    if "msr_grid" in result:
        plot_grid(result["msr_grid"], RESULTS / "raid-grid.png")
        print("wrote", RESULTS / "raid-grid.png")


if __name__ == "__main__":
    main()
