#!/usr/bin/python3
"""The paper-scale grid (Goda & Kitsuregawa, Figure 3 and Table 3): RTO x window x drive
profile, each cell a run of bench/energy/energy.py with the stock always-on standby and the
greenreplica standbys.  Long: hours per profile.  Results: bench/results/paper-*.json, and
bench/results/paper-grid.json summarising every cell.

Usage: paper_grid.py [--duration S] [--warehouses W] [--rate TPS] [--member-size SIZE]
                     [--profiles a,b] [--rtos 30,100,300] [--windows 32MB,128MB,512MB]
                     [--checkpoint-timeout 5min] [--summary paper-grid]

A single cell, or a reduced grid for a shorter session, is the same command with fewer
values, e.g. --profiles ultrastar-36z15 --rtos 100 --windows 128MB --duration 1200.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parents[1] / "bench" / "results"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=3600)
    p.add_argument("--warehouses", type=int, default=16)
    p.add_argument("--rate", type=int, default=400)
    p.add_argument("--profiles", default="ultrastar-36z15,deskstar-t7k250")
    p.add_argument("--rtos", default="30,100,300")
    p.add_argument("--windows", default="32MB,128MB,512MB")
    p.add_argument("--member-size", default="8GiB")
    p.add_argument("--shared-buffers", default="1GB", help="every standby's shared_buffers")
    p.add_argument("--checkpoint-timeout", default="5min")
    p.add_argument("--summary", default="paper-grid", help="stem of the summary JSON")
    p.add_argument("--tag", default="", help="suffix of each cell's result name, e.g. --tag=-sb1GB")
    args = p.parse_args()

    grid = []
    for profile in args.profiles.split(","):
        for rto in args.rtos.split(","):
            for window in args.windows.split(","):
                name = f"paper-{profile}-rto{rto}-{window}{args.tag}"
                cmd = [sys.executable, str(HERE / "energy.py"), "--profile", profile,
                       "--warehouses", str(args.warehouses), "--member-size", args.member_size,
                       "--duration", str(args.duration), "--rate", str(args.rate),
                       "--rto", rto, "--window", window, "--checkpoint-timeout", args.checkpoint_timeout,
                       "--shared-buffers", args.shared_buffers,
                       "--configs", "always_on,stock_tuned,defer,compact", "--name", name]
                print("paper grid:", " ".join(cmd), flush=True)
                cell = {"profile": profile, "rto_s": int(rto), "window": window, "result": f"{name}.json"}
                if subprocess.run(cmd).returncode == 0:
                    data = json.loads((RESULTS / f"{name}.json").read_text())
                    cell["configurations"] = {
                        c: {k: r[k] for k in ("energy_joules", "saving_vs_always_on", "saving_share_of_limit",
                                              "spin_cycles_per_day", "r_apl_over_r_gen", "rto_configured_s",
                                              "rto_measured_s")}
                        for c, r in data["configurations"].items()}
                else:
                    cell["error"] = "run failed"
                grid.append(cell)
                (RESULTS / f"{args.summary}.json").write_text(json.dumps(grid, indent=2))


if __name__ == "__main__":
    main()
