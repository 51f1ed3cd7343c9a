#!/usr/bin/python3
"""QMD staging buffer benchmark (not a test), issue 16 item 1: replay (virtual time) of QMD
trace presets through one mirrored pair of Ultrastar 15K600 disks plus an X25-M-class flash
member (policy `utilization`, Table 1; 2 GB buffer), with the staging buffer off
(`staging_bytes=0`, every buffered write is its own flash write: what the layout did before)
and on (1 MiB default; 256 KiB too).

Measured per preset and setting, per 1,000 foreground write requests of the trace: the flash
member's write requests and its busy (Active) seconds; plus the flash member's energy and
the response-time tail (the staging buffer must not change it: a write still completes when
its active-disk write does). In a replay the volume has no metadata journal, so the staged
bytes are appended on every volume tick (1 s) — the "flush" of the replay.

Scaling (minutes of wall time on the shared machine): one pair at 1/14 of each preset's rate
(the paper's per-disk load, as bench/qmd/qmd.py), HOURS (default 1) of each preset.
Writes bench/results/qmd-staging.json and qmd-staging.png.

  /usr/bin/python3 bench/qmd/staging.py [--bin PATH] [--hours H]
"""
import argparse
import datetime
import json
import sys
import time
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qmd import DISK, FLASH, MB, PAIRS_IN_PAPER, RESULTS, ROOT, plt, run  # noqa: E402

# Mean rates of synth.rs QMD_PRESETS (requests/s for the whole trace).
PRESETS = {"livemaps": 600.0, "cambridge-src1_1": 75.0}
SETTINGS = {"off": 0, "256 KiB": 256 << 10, "1 MiB": 1 << 20, "4 MiB": 4 << 20}


def writes_in(trace):
    """Foreground write requests of an MSR-format trace (Type column)."""
    n = 0
    for line in trace.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 3 and fields[3].strip().lower() == "write":
            n += 1
    return n


def replay(binary, trace, staging_bytes):
    args = ["replay", "--trace", str(trace), "--profile", str(DISK), "--layout", "qmd",
            "--policy", "utilization", "--stripe-unit", "65536", "--members", "3",
            "--flash-profile", str(FLASH), "--layout-option", f"buffer_bytes={2048 * MB}",
            "--layout-option", f"staging_bytes={staging_bytes}"]
    t0 = time.monotonic()
    r = json.loads(run(binary, args))
    r["wall_s"] = time.monotonic() - t0
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--hours", type=float, default=1.0)
    a = ap.parse_args()
    scale = 1.0 / PAIRS_IN_PAPER
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, iops in PRESETS.items():
            requests = int(iops * scale * a.hours * 3600)
            trace = Path(tmp) / f"{name}.csv"
            trace.write_text(run(a.bin, ["synth-trace", "--preset", name, "--rate-scale",
                                         str(scale), "--requests", str(requests),
                                         "--volume-bytes", str(500 * 10**9), "--seed", "16"]))
            writes = writes_in(trace)
            for label, staging in SETTINGS.items():
                r = replay(a.bin, trace, staging)
                flash = r["members"][2]
                per_k = 1000.0 / writes
                row = {
                    "preset": name, "hours": a.hours, "requests": requests,
                    "foreground_writes": writes, "staging": label,
                    "staging_bytes": staging,
                    "flash_writes": flash["writes"],
                    "flash_writes_per_1000": flash["writes"] * per_k,
                    "flash_active_s": flash["state_seconds"]["active"],
                    "flash_active_ms_per_1000": flash["state_seconds"]["active"] * per_k * 1e3,
                    "flash_energy_j": flash["energy_joules"],
                    "energy_j": r["energy_joules"],
                    "response_ms": r["response_ms"],
                    "wall_s": round(r["wall_s"], 1),
                }
                rows.append(row)
                p = r["response_ms"]
                print(f"{name:17} {label:8} writes {writes:7d}  flash writes/1000 "
                      f"{row['flash_writes_per_1000']:8.1f}  flash busy ms/1000 "
                      f"{row['flash_active_ms_per_1000']:8.1f}  p99.95 {p['p99_95']:.2f} ms"
                      f"  (wall {row['wall_s']} s)", flush=True)
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "scaling": f"one pair at 1/{PAIRS_IN_PAPER} of each preset's rate, {a.hours} h each",
        "disk_profile": "ultrastar-15k600", "flash_profile": "ssd (X25-M figures)",
        "buffer_bytes": 2048 * MB, "policy": "utilization (Table 1 defaults)",
        "flush": "replay: staged bytes appended every 1 s volume tick (no metadata journal)",
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "qmd-staging.json").write_text(json.dumps(out, indent=2) + "\n")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    presets = list(PRESETS)
    width = 0.8 / len(SETTINGS)
    for i, label in enumerate(SETTINGS):
        xs = [k + i * width for k in range(len(presets))]
        pick = [next(r for r in rows if r["preset"] == p and r["staging"] == label)
                for p in presets]
        ax1.bar(xs, [r["flash_writes_per_1000"] for r in pick], width, label=f"staging {label}")
        ax2.bar(xs, [r["flash_active_ms_per_1000"] for r in pick], width,
                label=f"staging {label}")
    for ax, title in ((ax1, "flash write requests per 1,000 writes"),
                      (ax2, "flash busy ms per 1,000 writes")):
        ax.set_xticks([k + width for k in range(len(presets))], presets)
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "qmd-staging.png", dpi=110)


if __name__ == "__main__":
    main()
