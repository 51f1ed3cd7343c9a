#!/usr/bin/python3
"""RoLo benchmark (not a test), first slice: energy and response time of raid10, graid and
rolo-p in replay (virtual time) on a write-heavy synthetic trace, normalized to raid10.

The drive is the ST1000NM0011 model (the paper's Table 5) with its capacity cut (default
2 GB) so that the logs fill, rotate and destage within a trace of minutes; the trace is
`synth-trace` with 90 % writes of 16 KiB at 40 IOPS, uniform, no diurnal swing. Three data
pairs: raid10 6 members, graid 7 (plus its log member), rolo-p 6. Policy `mirrors:30`.
Writes bench/results/rolo-replay.json and rolo-replay.png.

  /usr/bin/python3 bench/rolo/rolo.py [--bin PATH] [--requests N] [--capacity BYTES]
"""
import argparse
import datetime
import json
import re
import subprocess
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PROFILE = ROOT / "contrib-storage" / "profiles" / "seagate-st1000nm0011.toml"
LAYOUTS = [("raid10", 6), ("graid", 7), ("rolo-p", 6)]


def small_profile(capacity, directory):
    text = PROFILE.read_text()
    text = re.sub(r"(?m)^capacity_bytes = .*$", f"capacity_bytes = {capacity}", text, count=1)
    path = Path(directory) / "st1000nm0011-small.toml"
    path.write_text(text)
    return path


def run(binary, args):
    return subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--requests", type=int, default=150000)
    ap.add_argument("--capacity", type=int, default=2_000_000_000)
    ap.add_argument("--policy", default="mirrors:30")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        profile = small_profile(a.capacity, tmp)
        trace = Path(tmp) / "write-heavy.csv"
        volume_bytes = 3 * a.capacity * 3 // 4 * 9 // 10
        trace.write_text(run(a.bin, ["synth-trace", "--requests", str(a.requests), "--iops", "40",
                                     "--write-ratio", "0.9", "--request-bytes", "16384",
                                     "--volume-bytes", str(volume_bytes), "--diurnal", "0",
                                     "--seed", "15"]))
        rows = []
        for layout, members in LAYOUTS:
            r = json.loads(run(a.bin, ["replay", "--trace", str(trace), "--profile", str(profile),
                                       "--policy", a.policy, "--layout", layout,
                                       "--members", str(members)]))
            rows.append({
                "layout": layout, "members": members, "energy_j": r["energy_joules"],
                "duration_s": r["duration_s"], "response_ms": r["response_ms"],
                "spin_ups": r["spin_ups"],
                "standby_s": [m["state_seconds"].get("standby", 0.0) for m in r["members"]],
                "member_writes": [m["writes"] for m in r["members"]],
            })
    base = rows[0]
    for row in rows:
        row["energy_vs_raid10"] = row["energy_j"] / base["energy_j"]
        row["mean_response_vs_raid10"] = row["response_ms"]["mean"] / base["response_ms"]["mean"]
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "requests": a.requests, "capacity_bytes": a.capacity, "policy": a.policy,
        "trace": "synth-trace: 90 % writes, 16 KiB, 40 IOPS, uniform, no diurnal swing, seed 15",
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rolo-replay.json").write_text(json.dumps(out, indent=2) + "\n")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    names = [r["layout"] for r in rows]
    ax1.bar(names, [r["energy_vs_raid10"] for r in rows], color=["grey", "tab:orange", "tab:green"])
    ax1.set_ylabel("energy / raid10")
    ax1.set_title("energy (write-heavy replay)")
    ax2.bar(names, [r["response_ms"]["mean"] for r in rows], color=["grey", "tab:orange", "tab:green"])
    ax2.set_ylabel("mean response (ms)")
    ax2.set_title("response time")
    fig.tight_layout()
    fig.savefig(RESULTS / "rolo-replay.png", dpi=110)
    for r in rows:
        print(f'{r["layout"]:7} energy {r["energy_j"]:9.0f} J ({r["energy_vs_raid10"]:.3f} of raid10)'
              f'  mean {r["response_ms"]["mean"]:.2f} ms  p99 {r["response_ms"]["p99"]:.2f} ms')


if __name__ == "__main__":
    main()
