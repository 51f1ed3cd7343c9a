#!/usr/bin/python3
"""Drive-model benchmark (not a test): every built-in profile's model in virtual time.

For each profile, `greenreplica-storage drive-bench PROFILE` reports random 4 KiB reads at
queue depth 1, 4, 16 and 32 under FCFS and SPTF (mean and p99, IOPS), sequential bandwidth
per zone (outer to inner), and sorted scattered 4 KiB writes over 64 MiB at 10/33/66 %
density with the write cache off and on, each beside the previous model's figure.
Writes bench/results/drive-model.json and drive-model-*.png.  Runs as any user, in seconds.

  /usr/bin/python3 bench/drive-model/drive_model.py [--bin PATH] [--requests N]
"""
import argparse
import datetime
import json
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"

# Published gains of a deep queue over depth 1 for random reads, by drive class (no per-drive
# QD1/QD32 figures for these exact models were found; docs/benchmarks.md, "Drive model").
# Source: Wikipedia, "IOPS" (HDD section, citing StorageReview measurements): enterprise
# 7,200 rpm SATA drives (WD Raptor, Seagate Barracuda NL) "improve by nearly 100 % with deep
# queues"; high-end SCSI drives "generally show much greater improvement", the Seagate Savvio
# "exceeding 400 IOPS — more than doubling its performance".
PUBLISHED = {
    "7200rpm-sata": {"gain": 2.0, "relation": "about",
                     "source": "Wikipedia, IOPS: nearly 100 % with deep queues"},
    "10k-15k-scsi": {"gain": 2.0, "relation": "more than",
                     "source": "Wikipedia, IOPS: Savvio > 400 IOPS, more than double"},
}


def profiles(binary):
    out = subprocess.run([binary, "profiles"], check=True, capture_output=True, text=True).stdout
    return [p["name"] for p in json.loads(out)]


def bench(binary, name, requests):
    out = subprocess.run([binary, "drive-bench", name, "--requests", str(requests)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def point(report, scheduler, depth):
    return next(p for p in report["random_reads"]
                if p["scheduler"] == scheduler and p["depth"] == depth)


def summarize(report):
    d1 = point(report, "fcfs", 1)
    s32, f32 = point(report, "sptf", 32), point(report, "fcfs", 32)
    zones = report["zones"]
    return {
        "depth1_mean_ms": d1["response_ms"]["mean"],
        "expected_depth1_ms": report["expected_depth1_ms"],
        "legacy_depth1_mean_ms": report["legacy_depth1_mean_ms"],
        "iops_depth1": d1["iops"],
        "iops_sptf32": s32["iops"],
        "iops_fcfs32": f32["iops"],
        "sptf32_gain_over_depth1": s32["iops"] / d1["iops"] if d1["iops"] else None,
        "outer_mb_s": zones[0]["measured_mb_s"],
        "inner_mb_s": zones[-1]["measured_mb_s"],
        "published_class": published_class(report),
    }


def published_class(report):
    """The drive class whose published deep-queue gain applies (None for flash)."""
    if report["kind"] != "disk" or report["profile"] == "test-fast":
        return None
    return "10k-15k-scsi" if report["rpm"] >= 10000 else "7200rpm-sata"


def plot(reports, path_reads, path_zones, path_writes):
    # Real drives only: the fictional test-fast would flatten every axis.
    disks = [r for r in reports if r["kind"] == "disk" and r["profile"] != "test-fast"]
    colors = {r["profile"]: f"C{i}" for i, r in enumerate(disks)}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in disks:
        for ax, sched, style in ((axes[0], "fcfs", "--"), (axes[0], "sptf", "-")):
            pts = [point(r, sched, d) for d in (1, 4, 16, 32)]
            ax.plot([p["depth"] for p in pts], [p["iops"] for p in pts], style, marker="o",
                    color=colors[r["profile"]], label=f"{r['profile']} {sched}")
        pts = [point(r, "sptf", d) for d in (1, 4, 16, 32)]
        axes[1].plot([p["depth"] for p in pts], [p["response_ms"]["p99"] for p in pts], marker="o",
                     label=r["profile"])
    axes[0].set(xscale="log", xlabel="queue depth", ylabel="random 4 KiB reads per second",
                title="FCFS (dashed) vs SPTF (solid)")
    axes[0].set_xticks([1, 4, 16, 32], ["1", "4", "16", "32"])
    axes[0].legend(fontsize=6, ncol=2)
    axes[1].set(xscale="log", xlabel="queue depth", ylabel="p99 response (ms)", title="SPTF tail latency")
    axes[1].set_xticks([1, 4, 16, 32], ["1", "4", "16", "32"])
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path_reads, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in disks:
        ax.plot([z["zone"] for z in r["zones"]], [z["measured_mb_s"] for z in r["zones"]], marker="o",
                label=r["profile"])
    ax.set(xlabel="zone (0 = outermost)", ylabel="sequential read MB/s (1 MiB requests)",
           title="Bandwidth per zone")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path_zones, dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(disks), figsize=(3 * len(disks), 4), sharey=False)
    for ax, r in zip(axes, disks):
        rows = r["scattered_writes"]
        dens = sorted({w["density"] for w in rows})
        width = 0.27
        for i, (label, pick) in enumerate((("cache off", lambda w: not w["write_cache"]),
                                           ("cache on", lambda w: w["write_cache"]))):
            ax.bar([j + (i - 1) * width for j in range(len(dens))],
                   [next(w["seconds"] for w in rows if w["density"] == d and pick(w)) for d in dens],
                   width, label=label)
        ax.bar([j + width for j in range(len(dens))],
               [next(w["legacy_seconds"] for w in rows if w["density"] == d) for d in dens],
               width, label="old model")
        ax.set_xticks(range(len(dens)), [f"{int(d * 100)} %" for d in dens])
        ax.set_title(r["profile"], fontsize=8)
        ax.set_ylabel("s for 64 MiB region + FLUSH")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path_writes, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release" / "greenreplica-storage"))
    ap.add_argument("--requests", type=int, default=4000)
    args = ap.parse_args()
    reports = [bench(args.bin, name, args.requests) for name in profiles(args.bin)]
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "requests_per_point": args.requests,
        "published_sptf32_gain": PUBLISHED,
        "summary": {r["profile"]: summarize(r) for r in reports},
        "profiles": reports,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drive-model.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(reports, RESULTS / "drive-model-reads.png", RESULTS / "drive-model-zones.png",
         RESULTS / "drive-model-writes.png")
    for name, s in result["summary"].items():
        print(f"{name:22s} QD1 {s['depth1_mean_ms']:.2f} ms (expected {s['expected_depth1_ms']:.2f}, "
              f"old {s['legacy_depth1_mean_ms']:.2f}); IOPS QD1 {s['iops_depth1']:.0f}, "
              f"FCFS32 {s['iops_fcfs32']:.0f}, SPTF32 {s['iops_sptf32']:.0f} "
              f"(x{s['sptf32_gain_over_depth1'] or 0:.2f}{published_note(s)}); "
              f"MB/s outer {s['outer_mb_s']:.0f} inner {s['inner_mb_s']:.0f}")


def published_note(summary):
    cls = summary["published_class"]
    if not cls:
        return ""
    pub = PUBLISHED[cls]
    return f", published for {cls}: {pub['relation']} x{pub['gain']:.1f}"


if __name__ == "__main__":
    main()
