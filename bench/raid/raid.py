#!/usr/bin/python3
"""RAID benchmark (not a test): RAID5 and RAID6 against RAID10 in replay, and replay speed.

Every layout gets the same usable capacity (two drives' worth: RAID10 on 4 members, RAID5 on
3, RAID6 on 4) of the same drive profile and replays the same synthetic trace
(`greenreplica-storage synth-trace`) under the same power policy in virtual time
(`greenreplica-storage replay`, the event core). Reported per layout: energy, spin-ups,
response time (mean, p95, p99), member reads and writes (the parity layouts' extra I/O).
Replay speed: wall-clock seconds and requests per second for a 1 M-request trace, for this
build and, with --baseline-bin, for a build from before the event core.
Writes bench/results/raid.json and raid.png.  Runs as any user, in a few minutes.

  /usr/bin/python3 bench/raid/raid.py [--bin PATH] [--baseline-bin PATH] [--profile NAME]
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
LAYOUTS = [("raid10", 4), ("raid5", 3), ("raid6", 4)]


def synth(binary, path, requests, iops, seed):
    with open(path, "w") as out:
        subprocess.run([binary, "synth-trace", "--requests", str(requests), "--iops", str(iops),
                        "--volume-bytes", str(100_000_000_000), "--seed", str(seed)],
                       check=True, stdout=out)


def replay(binary, trace, profile, policy, layout, members, extra=()):
    started = time.monotonic()
    out = subprocess.run([binary, "replay", "--trace", str(trace), "--profile", profile,
                          "--policy", policy, "--layout", layout, "--members", str(members),
                          "--disk", "0", *extra],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out), time.monotonic() - started


def summary(report):
    members = report["members"]
    return {
        "energy_kj": report["energy_joules"] / 1e3,
        "spin_ups": report["spin_ups"],
        "response_ms": report["response_ms"],
        "member_reads": sum(m["reads"] for m in members),
        "member_writes": sum(m["writes"] for m in members),
        "requests": report["requests"],
        "requests_wrapped": report["requests_wrapped"],
        "duration_s": report["duration_s"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage/target/release/greenreplica-storage"))
    ap.add_argument("--baseline-bin", help="a build from before the event core, for replay speed")
    ap.add_argument("--profile", default="deskstar-t7k250")
    ap.add_argument("--policy", default="idle-timeout:60")
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--iops", type=float, default=5.0)
    ap.add_argument("--speed-requests", type=int, default=1_000_000)
    args = ap.parse_args()

    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "profile": args.profile, "policy": args.policy, "requests": args.requests,
              "iops": args.iops, "layouts": {}, "replay_speed": {}}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        synth(args.bin, trace, args.requests, args.iops, 7)
        for layout, members in LAYOUTS:
            for depth, scheduler in [(1, "fcfs"), (8, "sptf")]:
                report, _ = replay(args.bin, trace, args.profile, args.policy, layout, members,
                                   ["--queue-depth", str(depth), "--scheduler", scheduler])
                key = f"{layout}/{members} qd{depth} {scheduler}"
                result["layouts"][key] = summary(report) | {"layout": layout, "members": members,
                                                            "queue_depth": depth,
                                                            "scheduler": scheduler}
                print(key, json.dumps(result["layouts"][key]["response_ms"]),
                      f'{result["layouts"][key]["energy_kj"]:.1f} kJ', flush=True)
        speed_trace = Path(tmp) / "speed.csv"
        synth(args.bin, speed_trace, args.speed_requests, 20.0, 3)
        builds = [("event core", args.bin)]
        if args.baseline_bin:
            builds.append(("before the event core", args.baseline_bin))
        for name, binary in builds:
            for layout, members in LAYOUTS:
                if name != "event core" and layout != "raid10":
                    continue  # the old build has no parity layouts
                report, seconds = replay(binary, speed_trace, "test-fast", "always-on", layout,
                                         members)
                key = f"{name}: {layout}/{members}"
                result["replay_speed"][key] = {
                    "requests": report["requests"], "seconds": seconds,
                    "requests_per_s": report["requests"] / seconds,
                    "energy_kj": report["energy_joules"] / 1e3,
                    "mean_response_ms": report["response_ms"]["mean"]}
                print(key, f"{seconds:.2f} s", f'{report["requests"] / seconds:,.0f} req/s', flush=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "raid.json").write_text(json.dumps(result, indent=2) + "\n")

    keys = list(result["layouts"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    labels = [k.replace(" ", "\n", 1) for k in keys]
    axes[0].bar(labels, [result["layouts"][k]["energy_kj"] for k in keys], color="tab:green")
    axes[0].set_ylabel("energy (kJ)")
    axes[0].set_title(f"energy, {args.profile}, {args.policy}")
    for q, style in [("mean", "o"), ("p95", "s"), ("p99", "^")]:
        axes[1].plot(labels, [result["layouts"][k]["response_ms"][q] for k in keys], style,
                     label=q)
    axes[1].set_ylabel("response time (ms)")
    axes[1].set_title("response time")
    axes[1].legend()
    speed = result["replay_speed"]
    axes[2].barh(list(speed), [v["requests_per_s"] for v in speed.values()], color="tab:blue")
    axes[2].set_xlabel("requests per second (replay, 1 M requests)")
    axes[2].set_title("replay speed")
    for ax in axes[:2]:
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "raid.png", dpi=110)
    print("wrote", RESULTS / "raid.json", "and", RESULTS / "raid.png")


if __name__ == "__main__":
    main()
