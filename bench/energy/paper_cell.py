#!/usr/bin/python3
"""The paper cell's figures from a shorter run: R_apl/R_gen and start/stops per day projected
with Goda's formula, next to what the run itself counted.

A paper cell is an hour (ultrastar-36z15, RTO 100 s, 512 MB window, 4 warehouses); a run of
bench/energy/energy.py shorter than that holds one or two batches, too few to count cycles a
day directly.  This script takes the run's JSON and, when given, the standbys' logs (their
"batch applied" lines) and projects:

  R_apl               = WAL bytes of the run's batches / their prefetch + apply + flush seconds
                        (the wake, a spin-up, is the RTO budget's, not the apply rate's)
  k                   = R_apl / R_gen (R_gen: the standby's measured arrival rate)
  T_wnd (Goda)        = R_apl^2 / ((R_apl - R_gen) * R_gen) * T_RTO = k^2 / (k - 1) * T_RTO
  T_wnd (scheduler)   = the same with the budget the scheduler plans with,
                        T_RTO - margin - spin-up (margin = max(2 s, 10 % of the RTO))
  T_wnd (window cap)  = window_size / R_gen: a window never holds more than window_size
  cycles per day      = 86400 / min(T_wnd, window cap)

Usage: paper_cell.py RUN.json [--logs DIR] [--out NAME]   (writes NAME.json and NAME.png in
bench/results)
"""
import argparse
import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
BATCH = re.compile(r"batch applied (\d+) bytes of WAL: wake ([\d.]+) s, prefetch ([\d.]+) s, "
                   r"apply ([\d.]+) s, flush ([\d.]+) s, (\d+) buffers written")
UNITS = {"kB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}


def window_bytes(text):
    m = re.fullmatch(r"(\d+)\s*(kB|MB|GB)", text)
    return int(m.group(1)) * UNITS[m.group(2)]


def batches_of(log):
    out = []
    for b, w, p, a, f, n in BATCH.findall(log.read_text(errors="replace")):
        work = float(p) + float(a) + float(f)
        out.append({"wal_bytes": int(b), "wake_s": float(w), "prefetch_s": float(p), "apply_s": float(a),
                    "flush_s": float(f), "buffers_written": int(n),
                    "r_apl_bytes_per_s": int(b) / work if work else None})
    return out


def cycle_s(k, budget_s):
    return k * k / (k - 1) * budget_s if k > 1 else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run")
    p.add_argument("--logs", help="directory with the standbys' server logs (CONFIG.log)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    run = json.loads(Path(args.run).read_text())
    setup = run["setup"]
    rto = setup["rto"]
    window = window_bytes(setup["window"])
    margin = max(2.0, 0.10 * rto)
    summary = {"run": Path(args.run).name, "duration_s": run["duration_s"], "setup": setup,
               "rto_margin_s": margin, "configurations": {}}
    for config, r in run["configurations"].items():
        if r.get("rto_configured_s") is None:
            summary["configurations"][config] = {"rto_measured_s": r["rto_measured_s"],
                                                 "spin_cycles_per_day_measured": r["spin_cycles_per_day"]}
            continue
        spin_up = r["profile"]["spin_up_s"]
        batches = batches_of(Path(args.logs) / f"{config}.log") if args.logs else []
        # every batch's bytes over every batch's work seconds (a short catch-up batch weighs less)
        work = sum(b["prefetch_s"] + b["apply_s"] + b["flush_s"] for b in batches)
        r_apl = sum(b["wal_bytes"] for b in batches) / work if work else r["r_apl"]
        r_gen = r["r_gen"]
        k = r_apl / r_gen if r_apl and r_gen else None
        cap = window / r_gen if r_gen else None
        proj = {}
        for name, budget in (("goda", rto), ("scheduler_budget", rto - margin - spin_up)):
            t = cycle_s(k, budget) if k else None
            proj[name] = {"budget_s": budget, "t_wnd_s": t,
                          "cycles_per_day": 86400 / min(t, cap) if t and cap else None,
                          "cycles_per_day_without_window_cap": 86400 / t if t else None}
        summary["configurations"][config] = {
            "batches": batches,
            "r_apl_bytes_per_s": r_apl,
            "r_apl_source": "batch log: WAL bytes / (prefetch + apply + flush) s" if work else "scheduler's estimate",
            "r_apl_scheduler_estimate": r["r_apl"],
            "r_gen_bytes_per_s": r_gen,
            "r_apl_over_r_gen": k,
            "window_cap_s": cap,
            "projection": proj,
            "spin_cycles_per_day_measured": r["spin_cycles_per_day"],
            "largest_rto_estimate_s": r["largest_rto_estimate_s"],
            "rto_measured_s": r["rto_measured_s"],
            "promoted_at_worst_phase": r.get("promoted_at_worst_phase"),
            "failover_within_rto": (r["rto_measured_s"] is not None and r["rto_measured_s"] <= rto),
        }
    out = args.out or Path(args.run).stem + "-projection"
    (RESULTS / f"{out}.json").write_text(json.dumps(summary, indent=2))
    plot(summary, rto, window, margin, RESULTS / f"{out}.png")
    for c, s in summary["configurations"].items():
        if "projection" not in s:
            print(f"{c}: failover {s['rto_measured_s']:.2f} s")
            continue
        g, b = s["projection"]["goda"], s["projection"]["scheduler_budget"]
        print(f"{c}: R_apl {s['r_apl_bytes_per_s'] / 1e6:.2f} MB/s ({s['r_apl_source']}), "
              f"R_gen {s['r_gen_bytes_per_s'] / 1e6:.3f} MB/s, k {s['r_apl_over_r_gen']:.1f}; cycles/day "
              f"Goda {g['cycles_per_day']:.0f} (no window cap {g['cycles_per_day_without_window_cap']:.0f}), "
              f"scheduler budget {b['cycles_per_day']:.0f}; measured {s['spin_cycles_per_day_measured']:.0f}; "
              f"failover {s['rto_measured_s']:.2f} s")


def plot(summary, rto, window, margin, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ks = [2 + 0.2 * i for i in range(500)]
    ax.plot(ks, [86400 / cycle_s(k, rto) for k in ks], label=f"Goda, T_RTO {rto} s")
    spin = None
    for i, (c, s) in enumerate(summary["configurations"].items()):
        if "projection" not in s or not s["r_apl_over_r_gen"]:
            continue
        spin = s["projection"]["scheduler_budget"]["budget_s"]
        k = s["r_apl_over_r_gen"]
        ax.plot([k], [s["projection"]["goda"]["cycles_per_day"]], "o", label=f"{c} (window cap applied)")
        ax.annotate(f"{c}: k {k:.1f}", (k, s["projection"]["goda"]["cycles_per_day"]), fontsize=7,
                    xytext=(4, 4 + 10 * (i % 3)), textcoords="offset points")
        ax.axhline(86400 / s["window_cap_s"], color="grey", ls=":", lw=0.8)
    if spin:
        ax.plot(ks, [86400 / cycle_s(k, spin) for k in ks], ls="--",
                label=f"budget RTO - margin - spin-up = {spin:.0f} s")
    ax.axhline(24, color="red", lw=0.8, label="target: 24 a day")
    ax.axvline(50, color="green", lw=0.8, label="target: k = 50")
    ax.set_yscale("log")
    ax.set_xlabel("k = R_apl / R_gen")
    ax.set_ylabel("start/stop cycles per day")
    ax.set_title(f"paper cell projection ({window // 2 ** 20} MB window: dotted = window cap at the "
                 f"measured R_gen)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
