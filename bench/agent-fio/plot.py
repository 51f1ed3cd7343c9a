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

jobs = [j for j, r in data["ratios"].items() if r is not None]
target_of = {j: data["targets"]["sequential_1m"] if j.startswith("seq") else
             (data["targets"]["random_4k"] if j in ("randread_4k", "randwrite_4k") else None)
             for j in jobs}
# One bar per job and layout: the first layout only, unless the run measured several.
series = ({name: d["ratios"] for name, d in data["layouts"].items()} if "layouts" in data
          else {data.get("layout", "single"): data["ratios"]})
width = 0.8 / len(series)
palette = ["#8c8c8c", "#4c72b0", "#dd8452", "#55a868", "#8172b3"]

fig, ax = plt.subplots(figsize=(8 + 1.5 * (len(series) - 1), 4.5))
for k, (name, ratios) in enumerate(series.items()):
    xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(jobs))]
    vals = [ratios.get(j) or 0.0 for j in jobs]
    if len(series) == 1:
        colors = ["#4c9f70" if target_of[j] is None or v >= target_of[j] else "#c8553d"
                  for j, v in zip(jobs, vals)]
        bars = ax.bar(xs, vals, width, color=colors)
    else:
        bars = ax.bar(xs, vals, width, color=palette[k % len(palette)], label=name)
    for bar, v in zip(bars, vals):
        ax.annotate(f"{v:.2f}", (bar.get_x() + bar.get_width() / 2, v), ha="center",
                    va="bottom", fontsize=7 if len(series) > 1 else 10)
for i, j in enumerate(jobs):
    if target_of[j] is not None:
        ax.hlines(target_of[j], i - 0.4, i + 0.4, colors="black", linestyles="dashed")
ax.axhline(1.0, color="grey", linewidth=0.8)
ax.set_xticks(range(len(jobs)))
ax.set_xticklabels(jobs, rotation=15)
ax.set_ylabel("agent / raw (IOPS or MiB/s)")
if len(series) > 1:
    ax.legend(title="layout", fontsize=8)
ax.set_title(f"fio through a greenreplica-storage volume vs a plain file\n"
             f"{data['date']}, {data['cpus']} CPUs, median of {data['repeats']} runs; dashed: target")
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"agent-fio: wrote {out}")
