#!/usr/bin/python3
"""IDO benchmark (not a test): reconstruction time and user response time during the
reconstruction of PR, WorkOut, VDF and IDO (issue 17), in replay (virtual time).

Arrays as in the paper (Wu et al., FAST'12, section 4): a 4-disk RAID5 and a 6-disk RAID6,
64 KiB stripe unit, plus a 2-disk RAID1 surrogate set (`raid5-ido-s` with 6 members,
`raid6-ido-s` with 8); the four policies are `--layout-option rebuild=pr|workout|vdf|ido` of
the same personality, so the arrays are identical (PR leaves the surrogate idle). Drives:
the WD1600AAJS profile. Traces: `synth-trace --preset fin1|fin2|websearch2|msproject`.
Member 1 fails `--fail-at` seconds into the trace; a spare takes its slot at once and is
rebuilt at the minimum rate (1 or 10 MB/s) while user I/O reaches the array's disks, at
the maximum (200 MB/s) otherwise (MD's speed limits).

Scaled down so that the whole grid runs in minutes on a shared machine: members of
`--member-mb` MB instead of the paper's 10 GB, so rebuild times are about that factor
shorter; the trace runs until `--span` seconds, long enough for PR at 1 MB/s to finish.
VDF is applied to the surrogate set as in the paper (section 4.2): reads that needed the
failed member are kept there at their first read, writes redirected (docs/storage-agent.md).

Writes bench/results/ido-replay.json and ido-replay.png.

  /usr/bin/python3 bench/ido/ido.py [--bin PATH] [--member-mb N] [--span S]
"""
import argparse
import datetime
import json
import resource
import subprocess
import time
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PRESETS = {"fin1": 69.0, "fin2": 125.0, "websearch2": 113.0, "msproject": 40.0}
ARRAYS = [("raid5-ido-s", 6, 3), ("raid6-ido-s", 8, 4)]  # layout, members, data disks
MODES = ["pr", "workout", "vdf", "ido"]


def run(binary, args):
    return subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout


def healthy(a, trace, layout, members, track, member_bytes=None):
    """The trace on the healthy array, zone tracking `on` or `off`: mean response time,
    and the wall and CPU seconds of the replay process (the tracking's cost)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    out = run(a.bin, ["replay", "--trace", str(trace), "--profile", "wd1600aajs",
                      "--policy", "always-on", "--layout", layout, "--members", str(members),
                      "--stripe-unit", "65536",
                      "--member-bytes", str(member_bytes or a.member_mb * 10**6),
                      "--layout-option", f"track={track}"])
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = json.loads(out)
    return {
        "response_ms": r["response_ms"]["mean"],
        "requests": r["requests"],
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "zone_table_bytes": r["layout_metadata_bytes"],
    }


def replay(a, trace, layout, members, mode, min_mb_s, extra=()):
    out = run(a.bin, ["replay", "--trace", str(trace), "--profile", "wd1600aajs",
                      "--policy", "always-on", "--layout", layout, "--members", str(members),
                      "--stripe-unit", "65536", "--member-bytes", str(a.member_mb * 10**6),
                      "--fail-member", "1", "--fail-at", str(a.fail_at),
                      "--rebuild-min-mb-s", str(min_mb_s), "--rebuild-max-mb-s", "200",
                      "--layout-option", f"rebuild={mode}", *extra])
    r = json.loads(out)
    rec = r["reconstruction"]
    return {
        "reconstruction_s": rec["reconstruction_s"],
        "response_ms_during": rec["response_ms"]["mean"],
        "requests_during": rec["response_ms"]["count"],
        "surrogate_share": rec["surrogate_share"],
        "response_ms_all": r["response_ms"]["mean"],
        "requests": r["requests"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--member-mb", type=int, default=100)
    ap.add_argument("--fail-at", type=float, default=30.0)
    ap.add_argument("--span", type=float, default=260.0)
    ap.add_argument("--seed", type=int, default=17)
    a = ap.parse_args()
    rows = []
    zone_rows = []
    overhead_rows = []
    memory_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset, iops in PRESETS.items():
            for layout, members, data in ARRAYS:
                volume = data * a.member_mb * 10**6
                trace = Path(tmp) / f"{preset}-{layout}.csv"
                requests = int(iops * a.span)
                trace.write_text(run(a.bin, ["synth-trace", "--preset", preset,
                                             "--requests", str(requests),
                                             "--volume-bytes", str(volume),
                                             "--seed", str(a.seed)]))
                # Normal-state overhead of the popularity tracking: tracking on vs off.
                on, off = (healthy(a, trace, layout, members, t) for t in ("on", "off"))
                row = {"preset": preset, "layout": layout,
                       "response_ms_on": on["response_ms"], "response_ms_off": off["response_ms"],
                       "response_overhead": on["response_ms"] / off["response_ms"] - 1,
                       "cpu_s_on": on["cpu_s"], "cpu_s_off": off["cpu_s"],
                       "wall_s_on": on["wall_s"], "wall_s_off": off["wall_s"],
                       "zone_table_bytes": on["zone_table_bytes"]}
                print(json.dumps(row), flush=True)
                overhead_rows.append(row)
                if preset == "fin1":
                    # The zone table of the paper's 10 GB members (12 MiB zones).
                    paper = healthy(a, trace, layout, members, "on", member_bytes=10 * 10**9)
                    memory_rows.append({"layout": layout, "member_bytes": 10 * 10**9,
                                        "zone_table_bytes": paper["zone_table_bytes"]})
                    memory_rows.append({"layout": layout,
                                        "member_bytes": a.member_mb * 10**6,
                                        "zone_table_bytes": on["zone_table_bytes"]})
                if preset == "fin2" and layout == "raid5-ido-s":
                    # Zone size sweep (the paper tried 3-24 MB): IDO, 1 MB/s.
                    for zone_mib in (3, 6, 12, 24):
                        row = {"preset": preset, "layout": layout, "min_mb_s": 1,
                               "mode": "ido", "zone_mib": zone_mib,
                               **replay(a, trace, layout, members, "ido", 1,
                                        ["--layout-option", f"zone_size={zone_mib}MiB"])}
                        print(json.dumps(row), flush=True)
                        zone_rows.append(row)
                for min_mb_s in (1, 10):
                    for mode in MODES:
                        row = {"preset": preset, "layout": layout, "min_mb_s": min_mb_s,
                               "mode": mode, **replay(a, trace, layout, members, mode,
                                                      min_mb_s)}
                        print(json.dumps(row), flush=True)
                        rows.append(row)

    def get(preset, layout, min_mb_s, mode):
        return next(r for r in rows if (r["preset"], r["layout"], r["min_mb_s"], r["mode"])
                    == (preset, layout, min_mb_s, mode))

    ratios = []
    for preset in PRESETS:
        for layout, _, _ in ARRAYS:
            for min_mb_s in (1, 10):
                pr, wo, vdf, ido = (get(preset, layout, min_mb_s, m) for m in MODES)
                if None in (pr["reconstruction_s"], wo["reconstruction_s"],
                            vdf["reconstruction_s"], ido["reconstruction_s"]):
                    continue
                ratios.append({
                    "preset": preset, "layout": layout, "min_mb_s": min_mb_s,
                    "workout_over_ido_time": wo["reconstruction_s"] / ido["reconstruction_s"],
                    "vdf_over_ido_time": vdf["reconstruction_s"] / ido["reconstruction_s"],
                    "pr_over_ido_time": pr["reconstruction_s"] / ido["reconstruction_s"],
                    "workout_over_ido_response": wo["response_ms_during"]
                    / ido["response_ms_during"],
                    "vdf_over_ido_response": vdf["response_ms_during"]
                    / ido["response_ms_during"],
                })
    mean = (lambda k: sum(r[k] for r in ratios) / len(ratios)) if ratios else (lambda k: None)
    summary = {
        "mean_workout_over_ido_time": mean("workout_over_ido_time"),
        "mean_vdf_over_ido_time": mean("vdf_over_ido_time"),
        "mean_pr_over_ido_time": mean("pr_over_ido_time"),
        "mean_workout_over_ido_response": mean("workout_over_ido_response"),
        "mean_vdf_over_ido_response": mean("vdf_over_ido_response"),
        "target_workout_over_ido_time": 2.5,
        "paper_workout_over_ido_time": 2.0,
        "target_vdf_over_ido_time": 3.5,
        "paper_vdf_over_ido_time": 3.0,
        "mean_tracking_response_overhead": (sum(r["response_overhead"] for r in overhead_rows)
                                            / len(overhead_rows)) if overhead_rows else None,
        "tracking_cpu_overhead": (sum(r["cpu_s_on"] for r in overhead_rows)
                                  / sum(r["cpu_s_off"] for r in overhead_rows) - 1)
        if overhead_rows else None,
        "paper_tracking_overhead": "< 3 %",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "ido-replay",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "profile": "wd1600aajs",
        "member_bytes": a.member_mb * 10**6,
        "fail_at_s": a.fail_at,
        "trace_span_s": a.span,
        "seed": a.seed,
        "scaled": f"members of {a.member_mb} MB instead of the paper's 10 GB",
        "rows": rows,
        "zone_size_sweep": zone_rows,
        "tracking_overhead": overhead_rows,
        "zone_table_memory": memory_rows,
        "ratios": ratios,
        "summary": summary,
    }
    (RESULTS / "ido-replay.json").write_text(json.dumps(result, indent=2) + "\n")

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for col, layout in enumerate(l for l, _, _ in ARRAYS):
        for row_i, (key, label) in enumerate([("reconstruction_s", "reconstruction time (s)"),
                                              ("response_ms_during",
                                               "mean response during rebuild (ms)")]):
            ax = axes[row_i][col]
            width = 0.1
            x = range(len(PRESETS))
            for i, (mode, min_mb_s) in enumerate((m, b) for b in (1, 10) for m in MODES):
                vals = [get(p, layout, min_mb_s, mode)[key] or 0 for p in PRESETS]
                ax.bar([xi + (i - 3.5) * width for xi in x], vals, width,
                       label=f"{mode} {min_mb_s} MB/s")
            ax.set_xticks(list(x))
            ax.set_xticklabels(list(PRESETS))
            ax.set_ylabel(label)
            ax.set_title(f"{layout} (+2 surrogate), members {a.member_mb} MB")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "ido-replay.png", dpi=110)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
