#!/usr/bin/python3
"""Plots of an energy benchmark result: member power states over time per configuration,
and data-volume energy per configuration.  Usage: plot.py RESULT.json (PNGs beside it)."""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STATES = ["active", "idle", "spinning_up", "spinning_down", "standby"]
COLORS = {"active": "#c8553d", "idle": "#f2a541", "spinning_up": "#8e44ad",
          "spinning_down": "#3498db", "standby": "#4c9f70"}

path = Path(sys.argv[1])
data = json.loads(path.read_text())
configs = list(data["configurations"])
stem = path.with_suffix("")

# Power state over time: one band per member, one panel per configuration.
fig, axes = plt.subplots(len(configs), 1, figsize=(10, 1.3 + 1.1 * len(configs)), sharex=True)
axes = axes if len(configs) > 1 else [axes]
for ax, config in zip(axes, configs):
    rows = [s for s in data["samples"][config] if "members" in s]
    n = max((len(s["members"]) for s in rows), default=0)
    for m in range(n):
        # Merge consecutive samples in the same state: one bar per run, one call per state
        # (an hour's samples as single bars take minutes to draw).
        spans = {}
        start = None
        for a, b in zip(rows, rows[1:] + [None]):
            state = a["members"][m]
            start = a["t"] if start is None else start
            if b is None or b["members"][m] != state:
                end = a["t"] if b is None else b["t"]
                spans.setdefault(state, []).append((start, end - start))
                start = None
        for state, bars in spans.items():
            ax.broken_barh(bars, (m - 0.4, 0.8), color=COLORS.get(state, "grey"))
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"m{m}" for m in range(n)])
    r = data["configurations"][config]
    ax.set_ylabel(config, rotation=0, ha="right", va="center")
    ax.set_title(f"{config}: {r['energy_joules']:.0f} J, {r['spin_cycles']} spin cycles", fontsize=9, loc="left")
axes[-1].set_xlabel("seconds into the workload")
handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[s]) for s in STATES]
fig.legend(handles, STATES, loc="upper center", ncol=len(STATES), fontsize=8)
fig.tight_layout(rect=(0, 0, 1, 0.95))
fig.savefig(f"{stem}-power-states.png", dpi=100)

# Energy per configuration, with the physical limit.
fig, ax = plt.subplots(figsize=(8, 4))
energies = [data["configurations"][c]["energy_joules"] for c in configs]
bars = ax.bar(configs, energies, color="#4c78a8")
for bar, c in zip(bars, configs):
    s = data["configurations"][c]["saving_vs_always_on"]
    label = f"{bar.get_height():.0f} J" + (f"\n{s:.0%} saved" if s is not None else "")
    ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
ax.axhline(data["physical_limit_joules"], color="black", linestyle="--", linewidth=1)
ax.annotate("physical limit", (len(configs) - 0.5, data["physical_limit_joules"]), ha="right", va="bottom", fontsize=8)
ax.set_ylabel("data-volume energy of the standby (J)")
setup = data["setup"]
ax.set_title(f"{setup['profile']}, {data['duration_s']:.0f} s of TPC-C at {setup['rate']} tps, "
             f"RTO {setup['rto']} s, window {setup['window']}", fontsize=9)
plt.setp(ax.get_xticklabels(), rotation=12)
fig.tight_layout()
fig.savefig(f"{stem}-energy.png", dpi=110)
print(f"plots: {stem}-power-states.png, {stem}-energy.png")

# Energy per mirrored pair, when a run has volumes of several pairs (a RoLo-E volume beside
# RAID10): where the energy goes within each volume.
if any(len(data["configurations"][c].get("pairs", [])) > 1 for c in configs):
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(configs)
    for i, c in enumerate(configs):
        pairs = data["configurations"][c].get("pairs", [])
        xs = [p + i * width for p in range(len(pairs))]
        bars = ax.bar(xs, [p["energy_joules"] for p in pairs], width,
                      label=f"{c} ({data['configurations'][c].get('layout', '?')})")
        for bar, p in zip(bars, pairs):
            ax.annotate(f"{p['spin_ups']} up", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    npairs = max(len(data["configurations"][c].get("pairs", [])) for c in configs)
    ax.set_xticks([p + 0.4 - width / 2 for p in range(npairs)])
    ax.set_xticklabels([f"pair {p}" for p in range(npairs)])
    ax.set_xlabel("mirrored pair (members 2p, 2p+1); labels: spin-ups")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_ylabel("energy (J)")
    fig.tight_layout()
    fig.savefig(f"{stem}-pairs.png", dpi=110)
    print(f"plot: {stem}-pairs.png")
