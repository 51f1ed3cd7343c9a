#!/usr/bin/python3
"""RoLo reliability benchmark (not a test): the counterpart of the RoLo paper's Table 4.

Runs `greenreplica-storage reliability` (sequential Monte Carlo with the paper's Table 3
Weibull parameters, 100,000 arrays x 10 years, 10 disks, 5 pairs) for RAID10, GRAID,
RoLo-P, RoLo-R and RoLo-E under four readings of the paper's unpublished per-layout model:

  needed        a latent error is fatal only in data the restore needs (uniform placement,
                the paper's "uniform (spatial) distribution"); spun-down disks age as fast
                as spinning ones (the model's defaults)
  needed-sb0.5  the same, spun-down disks age at half the rate
  whole         Elerath & Pecht's reading: a restore reads its source disks whole, so a
                latent error anywhere on one is fatal
  whole-sb0.5   both

Reliability normalized to RAID10 as in Table 4 (RAID10's data-loss events / the layout's),
compared with the paper's ratios (target: within 10 %). A second seed of the default shows
the Monte Carlo noise. Writes bench/results/rolo-reliability.json and .png; runs in about a
minute, niced, one thread per run.

  /usr/bin/python3 bench/rolo/reliability.py [--bin PATH] [--arrays N] [--seed S]
"""
import argparse
import datetime
import json
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
LAYOUTS = ["raid10", "graid", "rolo-p", "rolo-r", "rolo-e"]
# Table 4 (UER 1e-15): data-loss events by double disk failure (NDF) and by a disk failure
# over a latent error (NUF), over the paper's 100,000 arrays x 10 years; "normalized" is
# RAID10's total over the scheme's.
PAPER = {
    "raid10": {"ndf": 21, "nuf": 3018, "total": 3039, "normalized": 1.0},
    "graid": {"ndf": 25, "nuf": 3506, "total": 3531, "normalized": 0.86},
    "rolo-p": {"ndf": 23, "nuf": 3086, "total": 3109, "normalized": 0.98},
    "rolo-r": {"ndf": 18, "nuf": 2492, "total": 2510, "normalized": 1.21},
    "rolo-e": {"ndf": 10, "nuf": 1526, "total": 1536, "normalized": 1.98},
}
VARIANTS = {
    "needed": [],
    "needed-sb0.5": ["--standby-failure-factor", "0.5"],
    "whole": ["--whole-disk-reads"],
    "whole-sb0.5": ["--whole-disk-reads", "--standby-failure-factor", "0.5"],
}
TOLERANCE = 0.10


def run(binary, layout, arrays, seed, extra, threads=1):
    cmd = ["nice", "-n", "10", binary, "reliability", "--layout", layout, "--arrays",
           str(arrays), "--years", "10", "--seed", str(seed), "--threads", str(threads), *extra]
    start = time.monotonic()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    report["wall_s"] = round(time.monotonic() - start, 3)
    return report


def table(binary, arrays, seed, extra):
    rows = {layout: run(binary, layout, arrays, seed, extra) for layout in LAYOUTS}
    base = rows["raid10"]["per_1000_arrays"]["data_loss_total"]
    out = {}
    for layout, r in rows.items():
        per = r["per_1000_arrays"]
        normalized = base / per["data_loss_total"] if per["data_loss_total"] else None
        paper = PAPER[layout]["normalized"]
        out[layout] = {
            "per_1000_arrays": per,
            "per_100000_arrays": {k: round(v * 100) for k, v in per.items()},
            "normalized": round(normalized, 3) if normalized else None,
            "paper_normalized": paper,
            "vs_paper": round(normalized / paper - 1, 3) if normalized else None,
            "within_10pct": normalized is not None and abs(normalized / paper - 1) <= TOLERANCE,
            "wall_s": r["wall_s"],
            "params": r["params"],
        }
    return out


def plot(results, path):
    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = ["paper"] + list(results["variants"])
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [PAPER[l]["normalized"] if name == "paper"
                  else results["variants"][name][l]["normalized"] for l in LAYOUTS]
        ax.bar([x + i * width for x in range(len(LAYOUTS))], values, width, label=name,
               color="black" if name == "paper" else None)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(LAYOUTS))], LAYOUTS)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel("reliability normalized to RAID10 (higher is better)")
    ax.set_title("Data-loss events, 100,000 arrays x 10 years: paper's Table 4 vs our model")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                             / "greenreplica-storage"))
    parser.add_argument("--arrays", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "arrays": args.arrays, "years": 10, "seed": args.seed, "paper": PAPER,
        "variants": {name: table(args.bin, args.arrays, args.seed, extra)
                     for name, extra in VARIANTS.items()},
    }
    results["noise_second_seed"] = table(args.bin, args.arrays, args.seed + 1, [])
    # Speed: GRAID (11 disks) on two threads, 100,000 and 1,000,000 arrays x 10 years.
    results["speed"] = {
        f"graid_{n}_arrays_2_threads_wall_s": run(args.bin, "graid", n, args.seed, [],
                                                  threads=2)["wall_s"]
        for n in (100_000, 1_000_000)
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rolo-reliability.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, RESULTS / "rolo-reliability.png")
    for name, rows in results["variants"].items():
        print(name)
        for layout, r in rows.items():
            p = r["per_100000_arrays"]
            print(f"  {layout:7} disk failures {p['disk_failures']:7} loss DF {p['data_loss_double_failure']:4}"
                  f" UF {p['data_loss_latent']:6} normalized {r['normalized']:.3f}"
                  f" (paper {r['paper_normalized']}, {r['vs_paper']:+.1%})")
    print("speed", results["speed"])


if __name__ == "__main__":
    main()
