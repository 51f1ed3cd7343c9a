#!/usr/bin/python3
"""RoLo benchmark grid (not a test): energy and mean response time of RAID10, GRAID, RoLo-P,
RoLo-R, RoLo-E and RoLo-S in replay (virtual time) on the seven `synth-trace --preset`s,
normalized to RAID10 (the counterpart of the paper's Fig. 8); RoLo-S against RoLo-P with
zebra widths 32/64/128 MB (Fig. 11); RoLo-P with and without the pre-wake of the next logger.

Scaling (so the grid runs in minutes): every preset is cut to --requests requests (the
paper's traces are a week long); the drive is the ST1000NM0011 model (Table 5) with its
capacity cut so that the preset's writes cycle the RoLo log pool (5 mirrors x log share x
rotation fill) about --cycles times, as a week of src2_2 cycles the paper's 1 TB disks'
pool about 2.4 times; clamped to 256 MB .. 4 GB. The array is Table 5's: 10 disks (5 pairs),
64 KiB stripe unit; GRAID has an 11th, its log disk. RAID10 runs always-on (the paper's
baseline); the logged layouts run `mirrors:30` (the layout pins the members it needs: the
primaries and the on-duty logger; RoLo-E only the on-duty pair). Each trace fits 90 % of
the RoLo volume. Writes bench/results/rolo-grid.json and rolo-grid.png.

  /usr/bin/python3 bench/rolo/grid.py [--bin PATH] [--requests N] [--cycles C] [--jobs J]
"""
import argparse
import concurrent.futures
import datetime
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PROFILE = ROOT / "contrib-storage" / "profiles" / "seagate-st1000nm0011.toml"
# name, write ratio, mean request KiB (Table 6, as in src/synth.rs)
PRESETS = [("src2_2", 0.996, 63.64), ("proj_0", 0.949, 51.42), ("mds_0", 0.881, 9.20),
           ("wdev_0", 0.799, 9.08), ("web_1", 0.459, 29.07), ("rsrch_2", 0.343, 4.08),
           ("hm_1", 0.047, 15.16)]
PAIRS = 5
LAYOUTS = [("raid10", 10, "always-on", []), ("graid", 11, "mirrors:30", []),
           ("rolo-p", 10, "mirrors:30", []), ("rolo-r", 10, "mirrors:30", []),
           ("rolo-e", 10, "mirrors:30", []), ("rolo-s", 10, "mirrors:30", [])]
ZEBRA_PRESETS = ["src2_2", "proj_0"]
ZEBRA_MB = [32, 64, 128]


def run(binary, args):
    return subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout


def capacity_for(requests, write_ratio, kib, cycles):
    written = requests * write_ratio * kib * 1024
    pool = PAIRS * 0.25 * 0.8
    return int(min(4e9, max(256e6, written / (cycles * pool))))


def replay(binary, trace, profile, layout, members, policy, extra):
    started = time.monotonic()
    r = json.loads(run(binary, ["replay", "--trace", str(trace), "--profile", str(profile),
                                "--policy", policy, "--layout", layout, "--members", str(members),
                                *extra]))
    return {
        "layout": layout, "members": members, "policy": policy, "options": extra,
        "energy_j": r["energy_joules"], "duration_s": r["duration_s"],
        "response_ms": r["response_ms"], "spin_ups": r["spin_ups"],
        "requests_wrapped": r["requests_wrapped"], "wall_s": time.monotonic() - started,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--cycles", type=float, default=2.5)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    started = time.monotonic()
    jobs = []
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        setups = {}
        for name, w, kib in PRESETS:
            cap = capacity_for(a.requests, w, kib, a.cycles)
            profile = Path(tmp) / f"st1000nm0011-{name}.toml"
            profile.write_text(re.sub(r"(?m)^capacity_bytes = .*$", f"capacity_bytes = {cap}",
                                      PROFILE.read_text(), count=1))
            trace = Path(tmp) / f"{name}.csv"
            volume = int(PAIRS * cap * 0.75 * 0.9)
            trace.write_text(run(a.bin, ["synth-trace", "--preset", name, "--requests",
                                         str(a.requests), "--volume-bytes", str(volume),
                                         "--seed", "15"]))
            setups[name] = (cap, profile, trace)
            for layout, members, policy, extra in LAYOUTS:
                jobs.append((("grid", name, layout),
                             pool.submit(replay, a.bin, trace, profile, layout, members, policy,
                                         extra)))
        for name in ZEBRA_PRESETS:
            cap, profile, trace = setups[name]
            for mb in ZEBRA_MB:
                jobs.append((("zebra", name, mb),
                             pool.submit(replay, a.bin, trace, profile, "rolo-s", 10,
                                         "mirrors:30", ["--layout-option", f"zebra_mb={mb}"])))
            jobs.append((("prewake-off", name, "rolo-p"),
                         pool.submit(replay, a.bin, trace, profile, "rolo-p", 10, "mirrors:30",
                                     ["--layout-option", "prewake_at=0"])))
        results = [(key, f.result()) for key, f in jobs]
    grid, zebra, prewake_off = {}, {}, {}
    for (kind, name, what), row in results:
        if kind == "grid":
            grid.setdefault(name, {})[what] = row
        elif kind == "zebra":
            zebra.setdefault(name, {})[what] = row
        else:
            prewake_off[name] = row
    for name, rows in grid.items():
        base = rows["raid10"]
        for row in rows.values():
            row["energy_vs_raid10"] = row["energy_j"] / base["energy_j"]
            row["mean_response_vs_raid10"] = (row["response_ms"]["mean"]
                                              / max(base["response_ms"]["mean"], 1e-9))
            row["energy_vs_graid"] = row["energy_j"] / rows["graid"]["energy_j"]
        for mb, row in zebra.get(name, {}).items():
            p = rows["rolo-p"]
            row["energy_vs_rolo_p"] = row["energy_j"] / p["energy_j"]
            row["mean_response_vs_rolo_p"] = row["response_ms"]["mean"] / p["response_ms"]["mean"]
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "requests": a.requests, "cycles": a.cycles,
        "capacity_bytes": {name: setups[name][0] for name in setups},
        "scaling": __doc__.split("Scaling")[1].split("Writes bench")[0].strip(),
        "grid": grid, "zebra": zebra, "prewake_off": prewake_off,
        "wall_s": time.monotonic() - started,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rolo-grid.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(grid, zebra)
    print_tables(grid, zebra, prewake_off)


def plot(grid, zebra):
    names = [p[0] for p in PRESETS]
    layouts = [l[0] for l in LAYOUTS]
    colors = ["grey", "tab:orange", "tab:green", "tab:blue", "tab:purple", "tab:red"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    width = 0.8 / len(layouts)
    for i, (layout, color) in enumerate(zip(layouts, colors)):
        xs = [j + (i - len(layouts) / 2 + 0.5) * width for j in range(len(names))]
        axes[0].bar(xs, [grid[n][layout]["energy_vs_raid10"] for n in names], width,
                    label=layout, color=color)
        axes[1].bar(xs, [max(grid[n][layout]["mean_response_vs_raid10"], 1e-3) for n in names],
                    width, label=layout, color=color)
    for ax, title in ((axes[0], "energy / RAID10"), (axes[1], "mean response / RAID10 (log)")):
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30)
        ax.set_title(title)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7, ncol=2)
    for name, marker in zip(ZEBRA_PRESETS, ["o", "s"]):
        rows = zebra.get(name, {})
        mbs = sorted(rows)
        axes[2].plot(mbs, [rows[m]["mean_response_vs_rolo_p"] for m in mbs], marker=marker,
                     label=f"{name} response / RoLo-P")
        axes[2].plot(mbs, [rows[m]["energy_vs_rolo_p"] for m in mbs], marker=marker,
                     linestyle="--", label=f"{name} energy / RoLo-P")
    axes[2].set_xscale("log", base=2)
    axes[2].set_xticks(ZEBRA_MB)
    axes[2].set_xticklabels([str(m) for m in ZEBRA_MB])
    axes[2].set_xlabel("zebra width (MB)")
    axes[2].set_title("RoLo-S vs RoLo-P")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "rolo-grid.png", dpi=110)


def print_tables(grid, zebra, prewake_off):
    layouts = [l[0] for l in LAYOUTS]
    print("energy / RAID10 | mean response ms")
    print("preset  " + " ".join(f"{l:>16}" for l in layouts))
    for name, _, _ in PRESETS:
        rows = grid[name]
        print(f"{name:8}" + " ".join(
            f'{rows[l]["energy_vs_raid10"]:6.3f} {rows[l]["response_ms"]["mean"]:8.1f}'
            for l in layouts))
    for name, rows in zebra.items():
        p = grid[name]["rolo-p"]
        print(f"{name} rolo-p {p['energy_j']:.0f} J {p['response_ms']['mean']:.1f} ms; " + "; ".join(
            f'zebra {mb} MB: {r["energy_vs_rolo_p"]:.3f} energy, '
            f'{r["mean_response_vs_rolo_p"]:.3f} response' for mb, r in sorted(rows.items())))
    for name, r in prewake_off.items():
        p = grid[name]["rolo-p"]
        print(f"{name} rolo-p without pre-wake: {r['energy_j']:.0f} J {r['response_ms']['mean']:.1f} ms"
              f" {r['spin_ups']} spin-ups (with: {p['energy_j']:.0f} J"
              f" {p['response_ms']['mean']:.1f} ms {p['spin_ups']} spin-ups)")


if __name__ == "__main__":
    main()
