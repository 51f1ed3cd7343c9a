#!/usr/bin/python3
"""QMD flash-extent compaction (issue 16, address-block compaction): flash extents held over
time in a long replay, with compaction (`compact_live=0.25`, the default) and without
(`compact_live=0`, the layout before it), and more eager (`compact_live=0.5`). Not a test.

Scaled down so that it runs in about a minute: one pair of Ultrastar 15K600 disks plus an
X25-M-class flash member, the cambridge-src1_1 preset at 1/14 of its rate (one pair of the
paper's 14), HOURS (default 24) of its 7 days, a 128 MB flash buffer (extents of 8 MB), policy
`utilization:wake_above=1` (the second disk wakes only when the buffer's fill forces the
write-back, so runs stay buffered longest) and Table 1's `utilization`.

Two traces: the preset as synthesized (writes spread uniformly over 500 GB: nothing is
overwritten, every extent stays full until the write-back empties it) and the same trace with
HOT_SHARE of its writes moved into a HOT_BYTES region (32 MB) (overwrite locality, as a standby's
replay of hot pages; our assumption, the synthetic preset has none): there, overwritten runs
leave extents holding a few live runs and address blocks, which pin them without compaction.
Writes bench/results/qmd-compaction.json and qmd-compaction.png.

  /usr/bin/python3 bench/qmd/compaction.py [--bin PATH] [--hours H]
"""
import argparse
import datetime
import json
import random
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
MB = 1 << 20
BUFFER = 128 * MB
HOT_SHARE = 0.9
HOT_BYTES = 32 * MB
SCALE = 1.0 / 14
IOPS = 75.0  # synth.rs QMD_PRESETS cambridge-src1_1
# One sample of the layout's state (every 600 s of trace time): these fields, in order.
SAMPLE_FIELDS = ["t_s", "extents_held", "buffered_bytes", "compacted_runs", "compacted_blocks"]


def run(binary, args):
    return subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout


def hot(src, dst, seed=16):
    """The trace with HOT_SHARE of its writes moved into the first HOT_BYTES (aligned as
    they were to 4 KiB)."""
    rng = random.Random(seed)
    out = []
    for line in src.read_text().splitlines():
        f = line.split(",")
        if f[3] == "Write" and rng.random() < HOT_SHARE:
            size = int(f[5])
            f[4] = str(rng.randrange(0, (HOT_BYTES - size) // 4096) * 4096)
        out.append(",".join(f))
    dst.write_text("\n".join(out) + "\n")


def replay(binary, trace, policy, compact_live):
    args = ["replay", "--trace", str(trace), "--profile", str(DISK), "--layout", "qmd",
            "--policy", policy, "--stripe-unit", "65536", "--members", "3",
            "--flash-profile", str(FLASH), "--layout-option", f"buffer_bytes={BUFFER}",
            "--layout-option", f"compact_live={compact_live}"]
    t0 = time.monotonic()
    r = json.loads(run(binary, args))
    samples = [[round(t, 1), *(s[f] for f in SAMPLE_FIELDS[1:])] for t, s in r["layout_samples"]]
    held = [s[1] for s in samples]
    second = r["members"][1]
    flash = r["members"][2]
    return {
        "policy": policy, "compact_live": compact_live,
        "energy_j": r["energy_joules"],
        "second_disk_spin_ups": second["spin_ups"],
        "second_disk_standby_s": second["state_seconds"].get("standby", 0.0),
        "extents_held_mean": sum(held) / len(held),
        "extents_held_max": max(held),
        "compacted_runs": samples[-1][3],
        "compacted_blocks": samples[-1][4],
        "flash_writes": flash.get("writes"),
        "response_ms": r["response_ms"],
        "samples": samples,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--replot", action="store_true", help="only redraw from the JSON")
    a = ap.parse_args()
    if a.replot:
        plot(json.loads((RESULTS / "qmd-compaction.json").read_text()))
        return
    requests = int(IOPS * SCALE * a.hours * 3600)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        uniform = Path(tmp) / "src1_1.csv"
        uniform.write_text(run(a.bin, ["synth-trace", "--preset", "cambridge-src1_1",
                                       "--rate-scale", str(SCALE), "--requests", str(requests),
                                       "--volume-bytes", str(500 * 10**9), "--seed", "16"]))
        hot_trace = Path(tmp) / "src1_1-hot.csv"
        hot(uniform, hot_trace)
        for trace_name, trace in (("uniform", uniform), ("hot writes", hot_trace)):
            for policy in ("utilization:wake_above=1", "utilization"):
                for compact in (0, 0.25, 0.5):
                    r = replay(a.bin, trace, policy, compact)
                    r["trace"] = trace_name
                    ex = excess(r)
                    r["extents_beyond_live_mean"] = sum(ex) / len(ex)
                    runs.append(r)
                    print(f"{trace_name:10} {policy:25} compact_live={compact:<4}: extents held"
                          f" mean {r['extents_held_mean']:5.2f} max {r['extents_held_max']:2d},"
                          f" second-disk spin-ups {r['second_disk_spin_ups']:3d},"
                          f" energy {r['energy_j'] / 1e3:8.1f} kJ, moved"
                          f" {r['compacted_runs']} runs {r['compacted_blocks']} blocks"
                          f" (wall {r['wall_s']} s)", flush=True)
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "scaling": f"one pair, cambridge-src1_1 at 1/14 of its rate, {a.hours} h, "
                   f"{requests} requests; flash buffer {BUFFER // MB} MB in 16 extents",
        "hot_writes": f"{HOT_SHARE:.0%} of writes moved into the first {HOT_BYTES // MB} MB",
        "sample_fields": SAMPLE_FIELDS,
        "runs": runs,
    }
    write(out)
    plot(out)


def write(out):
    """The JSON, one line per run (its samples are long)."""
    head = {k: v for k, v in out.items() if k != "runs"}
    text = json.dumps(head, indent=2)[:-2] + ',\n  "runs": [\n'
    text += ",\n".join("    " + json.dumps(r) for r in out["runs"]) + "\n  ]\n}\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "qmd-compaction.json").write_text(text)



def excess(r):
    """Extents held beyond those the live runs need (ceil(live / extent)): what pins."""
    ext = BUFFER / 16
    return [s[1] - -(-s[2] // ext) for s in r["samples"]]


def plot(out):
    runs = out["runs"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    for ax, trace_name in zip(axes, ("uniform", "hot writes")):
        for r in runs:
            if r["trace"] != trace_name or r["policy"] != "utilization:wake_above=1":
                continue
            hours = [s[0] / 3600 for s in r["samples"]]
            ex = excess(r)
            ax.step(hours, ex, where="post",
                    label=f"compact_live={r['compact_live']}: mean {sum(ex) / len(ex):.2f},"
                          f" {r['second_disk_spin_ups']} spin-ups")
        ax.set_title(f"cambridge-src1_1 ({trace_name}), wake on fill only", fontsize=10)
        ax.set_xlabel("trace hours")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("extents held beyond live runs")
    fig.tight_layout()
    fig.savefig(RESULTS / "qmd-compaction.png", dpi=110)


if __name__ == "__main__":
    main()
