#!/usr/bin/python3
"""QMD benchmark (not a test), first slice: replay (virtual time) of the three QMD trace
presets through one mirrored pair of Ultrastar 15K600 disks, as plain RAID10 (always-on)
and as QMD (the same pair plus an X25-M-class flash member, policy `utilization`, Table 1's
parameters).

Scaling, so that it runs in minutes on the shared machine: the paper replays each trace on
14 pairs (28 disks for cambridge-src1_1); here one pair takes 1/14 of the trace's rate
(`synth-trace --rate-scale 1/14`), so the per-disk load is the paper's. The cambridge
traces run for HOURS (default 24) of their 7 days, LiveMaps for LIVEMAPS_HOURS (default 6)
of its day; spin-downs per disk per week are extrapolated from that span (x 168 / hours).

Every QMD figure is measured with two policies in the same run: Table 1's fixed
`utilization` (the paper's) and `utilization:adaptive_wake=on` (break-even aware wake: a
wake whose burst is over once the disk has spun up doubles the busy epochs the next wake
needs). Measured per preset: energy of QMD vs RAID10 (flash member included) and the bound
of a second disk that never wakes, spin-downs of the second disk, response-time percentiles
99.5/99.9/99.95 with and without QMD; on cambridge-src1_1, spin-downs per disk per week for
buffers of 128 MB, 512 MB and 2 GB (also with `wake_above=1`: only the buffer wakes), the
tail with a spin-up threshold of 0.25 vs 0.6 and with `adaptive_sleep=on`, and K = 2 vs 10:
read response against the write-back rate (the replay's `write_back` report: net bytes the
buffer shrank by per second while it shrank, sampled every 0.25 s at completions).
Writes bench/results/qmd-replay.json and qmd-replay.png.

  /usr/bin/python3 bench/qmd/qmd.py [--bin PATH] [--hours H] [--livemaps-hours H]
"""
import argparse
import datetime
import json
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PROFILES = ROOT / "contrib-storage" / "profiles"
DISK = PROFILES / "ultrastar-15k600.toml"
FLASH = PROFILES / "ssd.toml"
PAIRS_IN_PAPER = 14
# Mean rates of synth.rs QMD_PRESETS (requests/s for the whole trace).
PRESETS = {"cambridge-src1_1": 75.0, "cambridge-usr2": 18.0, "livemaps": 600.0}
PAPER_SAVINGS = {"cambridge-src1_1": 0.31, "cambridge-usr2": 0.28, "livemaps": 0.11}
MB = 1 << 20
STANDBY_W = tomllib.loads(DISK.read_text())["standby_modes"][0]["power_w"]
TABLE1 = "utilization"
ADAPTIVE = "utilization:adaptive_wake=on"
POLICIES = (TABLE1, ADAPTIVE)


def run(binary, args):
    return subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout


def replay(binary, trace, layout, policy, options=()):
    args = ["replay", "--trace", str(trace), "--profile", str(DISK), "--layout", layout,
            "--policy", policy, "--stripe-unit", "65536"]
    if layout == "qmd":
        args += ["--members", "3", "--flash-profile", str(FLASH)]
        for o in options:
            args += ["--layout-option", o]
    else:
        args += ["--members", "2"]
    t0 = time.monotonic()
    r = json.loads(run(binary, args))
    r["wall_s"] = time.monotonic() - t0
    return r


def summary(r, hours):
    members = r["members"]
    wb = r.get("write_back") or {}
    return {
        "energy_j": r["energy_joules"],
        "disk_energy_j": sum(m["energy_joules"] for m in members[:2]),
        "duration_s": r["duration_s"],
        "requests": r["requests"],
        "spin_downs_second_disk": members[1]["spin_downs"],
        "spin_downs_per_disk_week": members[1]["spin_downs"] * 168.0 / hours,
        "standby_s_second_disk": members[1]["state_seconds"].get("standby", 0.0),
        "response_ms": r["response_ms"],
        "second_disk_bytes_written": members[1]["bytes_written"],
        "write_back": wb,
        # The energy if the second disk had slept the whole trace (everything else equal).
        "second_never_wakes_j": r["energy_joules"] - members[1]["energy_joules"]
        + STANDBY_W * r["duration_s"],
        "wall_s": round(r["wall_s"], 1),
    }


def rows_only(a, presets):
    """The per-preset rows alone (raid10, Table 1, adaptive wake), with each member's tail
    and deepest drive queue: the check of a layout change without the 19-minute grid."""
    scale = 1.0 / PAIRS_IN_PAPER
    rows, t_start = [], time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for name in presets:
            hours = a.livemaps_hours if name == "livemaps" else a.hours
            requests = int(PRESETS[name] * scale * hours * 3600)
            trace = Path(tmp) / f"{name}.csv"
            trace.write_text(run(a.bin, ["synth-trace", "--preset", name, "--rate-scale",
                                         str(scale), "--requests", str(requests),
                                         "--volume-bytes", str(500 * 10**9), "--seed", "16"]))
            row = {"preset": name, "hours": hours, "requests": requests}
            for label, layout, policy, opts in (
                    ("raid10", "raid10", "always-on", ()),
                    (TABLE1, "qmd", TABLE1, [f"buffer_bytes={a.buffer_bytes}"]),
                    (ADAPTIVE, "qmd", ADAPTIVE, [f"buffer_bytes={a.buffer_bytes}"])):
                r = replay(a.bin, trace, layout, policy, opts)
                q = summary(r, hours)
                q["members"] = [{"index": m["index"], "response_ms": m["response_ms"],
                                 "max_queue_depth": m.get("max_queue_depth")}
                                for m in r["members"]]
                row[label] = q
                if label != "raid10":
                    row[f"energy_saved {label}"] = 1.0 - q["energy_j"] / row["raid10"]["energy_j"]
                p = q["response_ms"]
                print(f"{name:17} {label:30} {q['energy_j']/1e3:8.1f} kJ  p99.5/99.9/99.95"
                      f" {p['p99_5']:.1f}/{p['p99_9']:.1f}/{p['p99_95']:.1f} ms  queues "
                      f"{[m['max_queue_depth'] for m in q['members']]}  (wall {q['wall_s']} s)",
                      flush=True)
            rows.append(row)
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "scaling": f"one pair at 1/{PAIRS_IN_PAPER} of each trace's rate; cambridge traces "
                   f"{a.hours} h, livemaps {a.livemaps_hours} h",
        "wall_s": round(time.monotonic() - t_start), "buffer_bytes": a.buffer_bytes,
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "qmd-replay-rows.json").write_text(json.dumps(out, indent=2) + "\n")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = ["raid10", TABLE1, ADAPTIVE]
    width = 0.27
    for i, label in enumerate(labels):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        ax1.bar(xs, [r[label]["energy_j"] / 1e3 for r in rows], width, label=label)
        ax2.bar(xs, [r[label]["response_ms"]["p99_95"] for r in rows], width, label=label)
    for ax, title in ((ax1, "energy (kJ)"), (ax2, "p99.95 response (ms, log)")):
        ax.set_xticks(range(len(rows)), [r["preset"] for r in rows])
        ax.set_title(title)
    ax2.set_yscale("log")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "qmd-replay-rows.png", dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--livemaps-hours", type=float, default=6.0)
    ap.add_argument("--buffer-bytes", type=int, default=2048 * MB,
                    help="QMD buffer of the per-preset runs")
    ap.add_argument("--rows-only", metavar="PRESET,...",
                    help="only the Table 1 / adaptive rows of these presets (no sweeps), "
                         "written to qmd-replay-rows.json/.png")
    a = ap.parse_args()
    if a.rows_only:
        return rows_only(a, a.rows_only.split(","))
    scale = 1.0 / PAIRS_IN_PAPER
    rows, sweep, thresholds, ks = [], [], [], []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for name, iops in PRESETS.items():
            hours = a.livemaps_hours if name == "livemaps" else a.hours
            requests = int(iops * scale * hours * 3600)
            trace = Path(tmp) / f"{name}.csv"
            trace.write_text(run(a.bin, ["synth-trace", "--preset", name, "--rate-scale",
                                         str(scale), "--requests", str(requests),
                                         "--volume-bytes", str(500 * 10**9), "--seed", "16"]))
            cache = {}

            def qmd(policy, buffer_bytes=a.buffer_bytes, k=None):
                key = (policy, buffer_bytes, k)
                if key not in cache:
                    opts = [f"buffer_bytes={buffer_bytes}"] + ([f"k={k}"] if k else [])
                    cache[key] = summary(replay(a.bin, trace, "qmd", policy, opts), hours)
                return cache[key]

            b = summary(replay(a.bin, trace, "raid10", "always-on"), hours)
            row = {"preset": name, "hours": hours, "requests": requests, "raid10": b,
                   "paper_saved": PAPER_SAVINGS[name]}
            for policy in POLICIES:
                q = qmd(policy)
                row[policy] = q
                row[f"energy_saved {policy}"] = 1.0 - q["energy_j"] / b["energy_j"]
                print(f"{name:17} {hours:4.0f} h {requests:8d} req  raid10 "
                      f"{b['energy_j']/1e3:8.1f} kJ  {policy:30} {q['energy_j']/1e3:8.1f} kJ"
                      f"  saved {row[f'energy_saved {policy}']*100:5.1f} %"
                      f"  second-disk spin-downs {q['spin_downs_second_disk']}"
                      f"  p99.95 {q['response_ms']['p99_95']:.1f} ms"
                      f"  (wall {b['wall_s']}+{q['wall_s']} s)", flush=True)
            row["bound_saved"] = 1.0 - min(row[p]["second_never_wakes_j"]
                                           for p in POLICIES) / b["energy_j"]
            rows.append(row)
            # K = 2 vs 10 where the load is bursty (src1_1) and where it is steady (livemaps).
            if name in ("cambridge-src1_1", "livemaps"):
                for policy in POLICIES:
                    for k in (2, 10):
                        r = qmd(policy, k=k)
                        ks.append({"preset": name, "policy": policy, "k": k, **r})
                        p, wb = r["response_ms"], r["write_back"]
                        print(f"  {policy:30} K={k:2}: mean {p['mean']:.2f} p99.95"
                              f" {p['p99_95']:.2f} ms, write-back"
                              f" {wb.get('drain_bytes_per_s', 0) / MB:.1f} MB/s while draining"
                              f" ({wb.get('drained_bytes', 0) / MB:.0f} MB drained,"
                              f" {wb.get('unresolved_drained_bytes', 0) / MB:.0f} MB between"
                              f" bursts), energy {r['energy_j']/1e3:8.1f} kJ", flush=True)
            if name != "cambridge-src1_1":
                continue
            # Table 1's policy, one that never wakes on utilization (wake_above=1), so that
            # only the buffer's fill wakes the second disk (the paper's Figure 7 effect), and
            # the adaptive wake.
            for policy in (TABLE1, "utilization:wake_above=1", ADAPTIVE):
                for mb in (128, 512, 2048):
                    r = qmd(policy, mb * MB)
                    sweep.append({"policy": policy, "buffer_mb": mb, **r})
                    print(f"  {policy:30} buffer {mb:5d} MB: "
                          f"{r['spin_downs_per_disk_week']:7.1f} spin-downs/disk/week,"
                          f" energy {r['energy_j']/1e3:8.1f} kJ", flush=True)
            for policy in POLICIES:
                for wake in (0.25, 0.6):
                    r = qmd(policy if wake == 0.25 else
                            f"{policy}{',' if ':' in policy else ':'}wake_above={wake}")
                    thresholds.append({"policy": policy, "wake_above": wake, **r})
            thresholds.append({"policy": "utilization:adaptive_sleep=on", "wake_above": 0.25,
                               **qmd("utilization:adaptive_sleep=on")})
            for t in thresholds:
                p = t["response_ms"]
                print(f"  {t['policy']:30} wake_above {t['wake_above']}: p99.5 {p['p99_5']:.2f}"
                      f" p99.9 {p['p99_9']:.2f} p99.95 {p['p99_95']:.2f} ms, energy"
                      f" {t['energy_j']/1e3:8.1f} kJ, {t['spin_downs_second_disk']} spin-downs",
                      flush=True)
    cut = {}
    for policy in (TABLE1, "utilization:wake_above=1", ADAPTIVE):
        pts = [s for s in sweep if s["policy"] == policy]
        first, last = pts[0]["spin_downs_per_disk_week"], pts[-1]["spin_downs_per_disk_week"]
        cut[policy] = 1.0 - last / first if first else None
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "scaling": f"one pair at 1/{PAIRS_IN_PAPER} of each trace's rate; cambridge traces "
                   f"{a.hours} h, livemaps {a.livemaps_hours} h; per week = x168/hours",
        "wall_s": round(time.monotonic() - t_start),
        "disk_profile": "ultrastar-15k600", "flash_profile": "ssd (X25-M figures)",
        "buffer_bytes": a.buffer_bytes, "policies": list(POLICIES),
        "rows": rows, "buffer_sweep": sweep, "spin_down_cut_128mb_to_2gb": cut,
        "wake_threshold": thresholds, "k": ks,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "qmd-replay.json").write_text(json.dumps(out, indent=2) + "\n")

    fig, (ax1, ax2, ax3, ax4) = plt.subplots(1, 4, figsize=(17, 3.9))
    names = [r["preset"] for r in rows]
    width = 0.38
    xs = range(len(names))
    for i, policy in enumerate(POLICIES):
        ax1.bar([x + (i - 0.5) * width for x in xs],
                [r[f"energy_saved {policy}"] * 100 for r in rows], width,
                label="Table 1" if policy == TABLE1 else "adaptive wake")
    ax1.scatter(xs, [r["paper_saved"] * 100 for r in rows], color="black", marker="_", s=400,
                label="paper")
    ax1.scatter(xs, [r["bound_saved"] * 100 for r in rows], color="red", marker="x",
                label="second disk never wakes")
    ax1.axhline(0, color="grey", lw=0.5)
    ax1.set_xticks(list(xs), names)
    ax1.set_ylabel("energy saved vs raid10 (%)")
    ax1.set_title("QMD energy saving")
    ax1.legend(fontsize=7)
    ax1.tick_params(axis="x", labelsize=7)
    for policy in (TABLE1, "utilization:wake_above=1", ADAPTIVE):
        pts = [s for s in sweep if s["policy"] == policy]
        ax2.plot([s["buffer_mb"] for s in pts],
                 [max(s["spin_downs_per_disk_week"], 0.5) for s in pts],
                 marker="o", label=policy)
    ax2.legend(fontsize=7)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("flash buffer (MB)")
    ax2.set_ylabel("spin-downs per disk per week")
    ax2.set_title("cambridge-src1_1")
    pct = ["p99_5", "p99_9", "p99_95"]
    x = range(len(pct))
    src = rows[0]
    ax3.plot(x, [src["raid10"]["response_ms"][p] for p in pct], marker="o", color="black",
             label="raid10")
    for t in thresholds:
        ax3.plot(x, [t["response_ms"][p] for p in pct], marker="o",
                 label=f"{t['policy'].replace('utilization', 'util')} wake>{t['wake_above']}")
    ax3.set_xticks(list(x), ["99.5", "99.9", "99.95"])
    ax3.set_yscale("log")
    ax3.set_xlabel("percentile")
    ax3.set_ylabel("response (ms)")
    ax3.set_title("tail, cambridge-src1_1")
    ax3.legend(fontsize=6)
    for policy in POLICIES:
        pts = [k for k in ks if k["policy"] == policy and k["preset"] == "cambridge-src1_1"]
        ax4.plot([k["write_back"].get("drain_bytes_per_s", 0) / MB for k in pts],
                 [k["response_ms"]["p99_95"] for k in pts], marker="o",
                 label="Table 1" if policy == TABLE1 else "adaptive wake")
        for k in pts:
            ax4.annotate(f"K={k['k']}", (k["write_back"].get("drain_bytes_per_s", 0) / MB,
                                         k["response_ms"]["p99_95"]), fontsize=7)
    ax4.set_xlabel("write-back while draining (MB/s, net)")
    ax4.set_ylabel("p99.95 response (ms)")
    ax4.set_title("K = 2 vs 10, cambridge-src1_1")
    ax4.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "qmd-replay.png", dpi=110)


if __name__ == "__main__":
    main()
