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

Measured per preset: energy of QMD vs RAID10 (flash member included), spin-downs of the
second disk, response-time percentiles 99.5/99.9/99.95 with and without QMD; on
cambridge-src1_1, spin-downs per disk per week for buffers of 128 MB, 512 MB and 2 GB, and
the tail with a spin-up threshold of 0.25 vs 0.6.
Writes bench/results/qmd-replay.json and qmd-replay.png.

  /usr/bin/python3 bench/qmd/qmd.py [--bin PATH] [--hours H] [--livemaps-hours H]
"""
import argparse
import datetime
import json
import subprocess
import tempfile
import time
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
    return {
        "energy_j": r["energy_joules"],
        "disk_energy_j": sum(m["energy_joules"] for m in members[:2]),
        "duration_s": r["duration_s"],
        "requests": r["requests"],
        "spin_downs_second_disk": members[1]["spin_downs"],
        "spin_downs_per_disk_week": members[1]["spin_downs"] * 168.0 / hours,
        "standby_s_second_disk": members[1]["state_seconds"].get("standby", 0.0),
        "response_ms": r["response_ms"],
        "wall_s": round(r["wall_s"], 1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--livemaps-hours", type=float, default=6.0)
    ap.add_argument("--buffer-bytes", type=int, default=2048 * MB,
                    help="QMD buffer of the per-preset runs")
    a = ap.parse_args()
    scale = 1.0 / PAIRS_IN_PAPER
    rows, sweep, thresholds, ks = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, iops in PRESETS.items():
            hours = a.livemaps_hours if name == "livemaps" else a.hours
            requests = int(iops * scale * hours * 3600)
            trace = Path(tmp) / f"{name}.csv"
            trace.write_text(run(a.bin, ["synth-trace", "--preset", name, "--rate-scale",
                                         str(scale), "--requests", str(requests),
                                         "--volume-bytes", str(500 * 10**9), "--seed", "16"]))
            base = replay(a.bin, trace, "raid10", "always-on")
            qmd = replay(a.bin, trace, "qmd", "utilization",
                         [f"buffer_bytes={a.buffer_bytes}"])
            b, q = summary(base, hours), summary(qmd, hours)
            rows.append({"preset": name, "hours": hours, "requests": requests,
                         "raid10": b, "qmd": q,
                         "energy_saved": 1.0 - q["energy_j"] / b["energy_j"],
                         "paper_saved": PAPER_SAVINGS[name]})
            print(f"{name:17} {hours:4.0f} h {requests:8d} req  raid10 {b['energy_j']/1e3:8.1f} kJ"
                  f"  qmd {q['energy_j']/1e3:8.1f} kJ  saved {rows[-1]['energy_saved']*100:5.1f} %"
                  f"  second-disk spin-downs {q['spin_downs_second_disk']}"
                  f"  (wall {b['wall_s']}+{q['wall_s']} s)", flush=True)
            if name != "cambridge-src1_1":
                continue
            # Table 1's policy, and one that never wakes on utilization (wake_above=1), so
            # that only the buffer's fill wakes the second disk (the paper's Figure 7 effect).
            for policy in ("utilization", "utilization:wake_above=1"):
                for mb in (128, 512, 2048):
                    r = summary(replay(a.bin, trace, "qmd", policy,
                                       [f"buffer_bytes={mb * MB}"]), hours)
                    sweep.append({"policy": policy, "buffer_mb": mb, **r})
                    print(f"  {policy:25} buffer {mb:5d} MB: "
                          f"{r['spin_downs_per_disk_week']:7.1f} spin-downs/disk/week,"
                          f" energy {r['energy_j']/1e3:8.1f} kJ", flush=True)
            for k in (2, 10):
                r = summary(replay(a.bin, trace, "qmd", "utilization",
                                   [f"buffer_bytes={a.buffer_bytes}", f"k={k}"]), hours)
                ks.append({"k": k, **r})
                p = r["response_ms"]
                print(f"  K={k}: mean {p['mean']:.2f} p99.95 {p['p99_95']:.2f} ms,"
                      f" energy {r['energy_j']/1e3:8.1f} kJ", flush=True)
            for wake in (0.25, 0.6):
                r = summary(replay(a.bin, trace, "qmd", f"utilization:wake_above={wake}",
                                   [f"buffer_bytes={a.buffer_bytes}"]), hours)
                thresholds.append({"wake_above": wake, **r})
                p = r["response_ms"]
                print(f"  wake_above {wake}: p99.5 {p['p99_5']:.2f} p99.9 {p['p99_9']:.2f}"
                      f" p99.95 {p['p99_95']:.2f} ms", flush=True)
    cut = {}
    for policy in ("utilization", "utilization:wake_above=1"):
        pts = [s for s in sweep if s["policy"] == policy]
        first, last = pts[0]["spin_downs_per_disk_week"], pts[-1]["spin_downs_per_disk_week"]
        cut[policy] = 1.0 - last / first if first else None
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "scaling": f"one pair at 1/{PAIRS_IN_PAPER} of each trace's rate; cambridge traces "
                   f"{a.hours} h, livemaps {a.livemaps_hours} h; per week = x168/hours",
        "disk_profile": "ultrastar-15k600", "flash_profile": "ssd (X25-M figures)",
        "buffer_bytes": a.buffer_bytes, "policy": "utilization (Table 1 defaults)",
        "rows": rows, "buffer_sweep": sweep, "spin_down_cut_128mb_to_2gb": cut,
        "wake_threshold": thresholds, "k": ks,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "qmd-replay.json").write_text(json.dumps(out, indent=2) + "\n")

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 3.8))
    names = [r["preset"] for r in rows]
    ax1.bar(names, [r["energy_saved"] * 100 for r in rows], color="tab:green", label="measured")
    ax1.scatter(names, [r["paper_saved"] * 100 for r in rows], color="black", marker="_", s=400,
                label="paper")
    ax1.set_ylabel("energy saved vs raid10 (%)")
    ax1.set_title("QMD energy saving")
    ax1.legend()
    ax1.tick_params(axis="x", labelsize=7)
    for policy in ("utilization", "utilization:wake_above=1"):
        pts = [s for s in sweep if s["policy"] == policy]
        ax2.plot([s["buffer_mb"] for s in pts], [s["spin_downs_per_disk_week"] for s in pts],
                 marker="o", label=policy)
    ax2.legend(fontsize=7)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("flash buffer (MB)")
    ax2.set_ylabel("spin-downs per disk per week")
    ax2.set_title("cambridge-src1_1")
    pct = ["p99_5", "p99_9", "p99_95"]
    x = range(len(pct))
    src = rows[0]
    ax3.plot(x, [src["raid10"]["response_ms"][p] for p in pct], marker="o", label="raid10")
    for t in thresholds:
        ax3.plot(x, [t["response_ms"][p] for p in pct], marker="o",
                 label=f"qmd wake>{t['wake_above']}")
    ax3.set_xticks(list(x), ["99.5", "99.9", "99.95"])
    ax3.set_yscale("log")
    ax3.set_xlabel("percentile")
    ax3.set_ylabel("response (ms)")
    ax3.set_title("tail, cambridge-src1_1")
    ax3.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "qmd-replay.png", dpi=110)


if __name__ == "__main__":
    main()
