"""Plot bench/results/raid.json: energy, response time and member I/O per user write of
RAID10, RAID5 and RAID6 per trace, profile and policy, with Linux MD's expected member I/O.

Run with Debian's python3 (python3-matplotlib): /usr/bin/python3 bench/raid/plot.py [JSON]
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

results = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/raid.json")
out = results.with_suffix(".png")
data = json.loads(results.read_text())
runs = data["runs"]
layouts = ["raid10", "raid5", "raid6"]
colors = {"raid10": "#4c72b0", "raid5": "#dd8452", "raid6": "#55a868"}
traces = list(data["traces"])
profiles = sorted({r["profile"] for r in runs})
policies = sorted({r["policy"] for r in runs}, key=lambda p: p != "always-on")
cases = [(t, pr, po) for t in traces for pr in profiles for po in policies]


def find(t, pr, po, lay):
    for r in runs:
        if (r["trace"], r["profile"], r["policy"], r["layout"]) == (t, pr, po, lay):
            return r
    return None


fig, axes = plt.subplots(4, 1, figsize=(13, 15))
width = 0.27
xs = range(len(cases))
labels = [f"{t}\n{pr.split('-')[0]}\n{po.replace('idle-timeout', 'idle')}"
          for t, pr, po in cases]
for k, lay in enumerate(layouts):
    off = (k - 1) * width
    rel = []
    mean = []
    p99 = []
    for t, pr, po in cases:
        r, base = find(t, pr, po, lay), find(t, pr, po, "raid10")
        rel.append(r["energy_j"] / base["energy_j"] if r and base else 0)
        mean.append(r["response_ms"]["mean"] if r else 0)
        p99.append(r["response_ms"]["p99"] if r else 0)
    axes[0].bar([x + off for x in xs], rel, width, label=lay, color=colors[lay])
    axes[1].bar([x + off for x in xs], mean, width, label=lay, color=colors[lay])
    axes[2].bar([x + off for x in xs], p99, width, label=lay, color=colors[lay])
axes[0].axhline(1.0, color="grey", linewidth=0.8)
axes[0].set_ylabel("energy / RAID10's")
axes[1].set_ylabel("mean response (ms)")
axes[2].set_ylabel("p99 response (ms)")
axes[1].set_yscale("log")
axes[2].set_yscale("log")
for ax in axes[:3]:
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.legend(fontsize=8)

# Member I/O per user write: measured (always-on, first profile) beside MD's model.
ax = axes[3]
md = {(m["trace"], m["layout"]): m for m in data["md_model"]}
groups = [(t, lay) for t in traces for lay in layouts]
gx = range(len(groups))
meas_r, meas_w, md_r, md_w = [], [], [], []
for t, lay in groups:
    r = find(t, profiles[0], "always-on", lay)
    meas_r.append(r["member_reads_per_user_write"])
    meas_w.append(r["member_writes_per_user_write"])
    md_r.append(md[(t, lay)]["reads_per_user_write"])
    md_w.append(md[(t, lay)]["writes_per_user_write"])
w = 0.2
ax.bar([x - 1.5 * w for x in gx], meas_r, w, label="engine: member reads / user write",
       color="#dd8452")
ax.bar([x - 0.5 * w for x in gx], md_r, w, label="Linux MD model: reads / user write",
       color="#f3c19d")
ax.bar([x + 0.5 * w for x in gx], meas_w, w, label="engine: member writes / user write",
       color="#4c72b0")
ax.bar([x + 1.5 * w for x in gx], md_w, w, label="Linux MD model: writes / user write",
       color="#a8bfe0")
ax.set_xticks(list(gx))
ax.set_xticklabels([f"{t}\n{lay}" for t, lay in groups], fontsize=8)
ax.set_ylabel("member requests per user write")
ax.legend(fontsize=8)
fig.suptitle(f"RAID10 vs RAID5 vs RAID6 in replay, {data['members']} members, chunk "
             f"{data['chunk_bytes'] // 1024} KiB ({data['date']}, one run each)\n"
             f"usable members: " + ", ".join(f"{k} {v}" for k, v in
                                             data["usable_capacity_members"].items()))
fig.tight_layout()
fig.savefig(out, dpi=100)
print(f"raid: wrote {out}", file=sys.stderr)
