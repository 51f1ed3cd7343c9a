"""Plot bench/results/agent-fio.json: agent throughput as a share of raw, per job, with targets.

Run with Debian's python3 (python3-matplotlib): /usr/bin/python3 bench/agent-fio/plot.py
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

results = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/agent-fio.json")
out = results.with_suffix(".png")
data = json.loads(results.read_text())

jobs = list(data["ratios"].keys())
ratios = [data["ratios"][j] for j in jobs]
targets = [
    data["targets"]["sequential_1m"] if j.startswith("seq") else
    (data["targets"]["random_4k"] if j in ("randread_4k", "randwrite_4k") else None)
    for j in jobs
]

fig, ax = plt.subplots(figsize=(8, 4.5))
bars = ax.bar(jobs, ratios, color=["#4c9f70" if t is None or r >= t else "#c8553d"
                                   for r, t in zip(ratios, targets)])
for i, t in enumerate(targets):
    if t is not None:
        ax.hlines(t, i - 0.4, i + 0.4, colors="black", linestyles="dashed")
for bar, r in zip(bars, ratios):
    ax.annotate(f"{r:.2f}", (bar.get_x() + bar.get_width() / 2, r), ha="center", va="bottom")
ax.axhline(1.0, color="grey", linewidth=0.8)
ax.set_ylabel("agent / raw (IOPS or MiB/s)")
ax.set_title(f"fio through a greenreplica-storage volume vs a plain file\n"
             f"{data['date']}, {data['cpus']} CPUs, median of {data['repeats']} runs; dashed: target")
plt.setp(ax.get_xticklabels(), rotation=15)
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"agent-fio: wrote {out}")
