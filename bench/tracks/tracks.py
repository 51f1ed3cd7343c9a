#!/usr/bin/python3
"""Track-alignment benchmark (not a test), first slice: one emulated Maxtor Atlas 10K V unit
in virtual time (`greenreplica-storage tracks-bench`), boundaries from the timing
extraction, against the track-alignment paper's figures:

  - 64-sector accesses crossing a track boundary or not, random boundaries of the first
    zone (paper Figure 3: 7.3 vs 5.7 ms);
  - two 64 MiB files read interleaved like diff, track-aligned vs unaligned requests, drive
    prefetch on and off (paper Figure 6: aligned ~2x);
  - one sequential stream of 128 MiB, 128 KiB requests vs whole-block track extents
    (paper Figure 5: -3 %);
  - full-stripe reads over four units, chunks of one track of each member (track-aligned,
    chunks differ per member) vs chunks of the mean track size (paper: RAID5 +57 %);
  - the same full-stripe reads through the volume engine (layout raid0-tracks vs the same
    personality over fixed chunks, event core in virtual time), 1-16 readers in rounds;
  - track-aligned vs conventional RAID5 through the engine (raid5-tracks, with and without the
    filled-in parity read, vs RAID5 with track-sized chunks), five units as in the paper, and
    five drives of one unit (equal track sizes), 1-16 readers (paper +57 %, 3.3x scaling),
    and the paper's per-member rows (`stripe = per_member`) on the five units;
  - track-aligned vs conventional RAID10 through the engine (raid10-tracks: each mirror's
    rows on its own tracks), two pairs of differing units, 1-16 readers;
  - extraction time of whole units (the paper: ~7 minutes by SCSI address translation).

Writes bench/results/tracks.json and tracks.png.

  /usr/bin/python3 bench/tracks/tracks.py [--bin PATH] [--unit N] [--units N]
"""
import argparse
import datetime
import json
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PAPER = {"crossing_ms": 7.3, "within_ms": 5.7, "diff_speedup": 2.0, "stream_pct": -3.0,
         "extraction_minutes": 7.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "contrib-storage" / "target" / "release"
                                         / "greenreplica-storage"))
    ap.add_argument("--profile", default="maxtor-atlas-10k-v")
    ap.add_argument("--unit", type=int, default=1)
    ap.add_argument("--units", type=int, default=6)
    ap.add_argument("--samples", type=int, default=2000)
    a = ap.parse_args()
    out = subprocess.run([a.bin, "tracks-bench", a.profile, "--unit", str(a.unit), "--units",
                          str(a.units), "--samples", str(a.samples)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    r["paper"] = PAPER
    r["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    points = r["crossing"]["points"]
    stored = dict(r, crossing=dict(r["crossing"], points=[[o, round(ms, 3)]
                                                          for o, ms in points[:1000]]))
    text = json.dumps(stored, indent=1)
    # One line per scatter point pair is long enough; keep the file small.
    (RESULTS / "tracks.json").write_text(json.dumps(stored, separators=(",", ":")) + "\n"
                                         if len(text) > 200_000 else text + "\n")

    fig, ax = plt.subplots(2, 5, figsize=(27, 8))
    c = r["crossing"]
    xs = [p[0] for p in c["points"]]
    ys = [p[1] for p in c["points"]]
    ax[0][0].scatter(xs, ys, s=2, alpha=0.4)
    ax[0][0].set_xlim(-200, 400)
    ax[0][0].axvline(0, color="grey", lw=0.5)
    ax[0][0].set_title(f"64-sector access vs offset from a boundary\n"
                       f"crossing {c['crossing_ms']:.2f} ms, within {c['within_ms']:.2f} ms "
                       f"(paper 7.3 / 5.7)")
    ax[0][0].set_xlabel("start offset from track boundary (sectors)")
    ax[0][0].set_ylabel("access time (ms)")

    rows = r["interleaved"]
    labels = [f"{x['case']}\n{'prefetch' if x['prefetch'] else 'no prefetch'}" for x in rows]
    ax[0][1].bar(range(len(rows)), [x["mb_s"] for x in rows])
    ax[0][1].set_xticks(range(len(rows)), labels, fontsize=7, rotation=25)
    ax[0][1].set_ylabel("MB/s")
    ax[0][1].set_title(f"diff-like interleaved reads: aligned / normal = "
                       f"{r['aligned_vs_normal_diff']:.2f}x (paper ~2x)")

    s = r["stream"]
    ax[1][0].bar([0, 1], [s["normal_mb_s"], s["aligned_mb_s"]])
    ax[1][0].set_xticks([0, 1], ["128 KiB requests", "track extents"])
    ax[1][0].set_ylabel("MB/s")
    ax[1][0].set_title(f"one sequential stream: {s['change_pct']:+.2f} % (paper -3 %)")

    e = r["extraction"]
    ax[1][1].bar([x["unit"] for x in e], [x["device_minutes"] for x in e])
    ax[1][1].axhline(PAPER["extraction_minutes"], color="red", lw=1,
                     label="paper (SCSI translation)")
    ax[1][1].set_xlabel("unit (drive seed)")
    ax[1][1].set_ylabel("device minutes (virtual)")
    ax[1][1].set_title("whole-drive extraction by timing, 73 GB")
    ax[1][1].legend(loc="lower right")
    st = r["striping"]
    ax[0][2].bar([0, 1], [st["conventional_mb_s"], st["track_aligned_mb_s"]])
    ax[0][2].set_xticks([0, 1], [f"{st['conventional_chunk_sectors']}-sector chunks",
                                 "one track per chunk"])
    ax[0][2].set_ylabel("MB/s")
    ax[0][2].set_title(f"full-stripe reads, {st['members']} units: x{st['gain']:.2f}\n"
                       f"(paper: track-aligned RAID5 +57 %)")
    rd = st["readers"]
    ax[1][2].plot([x["readers"] for x in rd], [x["conventional_mb_s"] for x in rd], "o-",
                  label="fixed chunks")
    ax[1][2].plot([x["readers"] for x in rd], [x["track_aligned_mb_s"] for x in rd], "o-",
                  label="track-aligned chunks")
    ax[1][2].set_xscale("log", base=2)
    ax[1][2].set_xlabel("concurrent readers (closed loop, SPTF)")
    ax[1][2].set_ylabel("MB/s")
    ax[1][2].set_title("full-stripe reads by readers (paper: 3.3x better scaling)")
    ax[1][2].legend()
    vs = r["volume_striping"]
    vr = vs["rounds"]
    ax[0][3].plot([x["readers"] for x in vr], [x["conventional_mb_s"] for x in vr], "o-",
                  label=f"fixed {vs['conventional_chunk_sectors']}-sector chunks")
    ax[0][3].plot([x["readers"] for x in vr], [x["track_aligned_mb_s"] for x in vr], "o-",
                  label="raid0-tracks")
    ax[0][3].set_xscale("log", base=2)
    ax[0][3].set_xlabel("readers (rounds of full-stripe reads)")
    ax[0][3].set_ylabel("MB/s")
    ax[0][3].set_title(f"volume engine (raid0-tracks), {vs['members']} units:\n"
                       f"x{vr[0]['gain']:.2f} (1 reader) -> x{vr[-1]['gain']:.2f} (16)")
    ax[0][3].legend()
    r5 = r["raid5_striping"]
    for case, style, name in ((r5, "-", "5 units"), (r5["same_unit"], "--", "one unit x5")):
        rr = case["rounds"]
        xs = [x["readers"] for x in rr]
        ax[1][3].plot(xs, [x["conventional_mb_s"] for x in rr], "o" + style, color="C0",
                      label=f"raid5, {case['conventional_chunk_sectors']}-sector chunks, {name}")
        ax[1][3].plot(xs, [x["track_aligned_mb_s"] for x in rr], "o" + style, color="C1",
                      label=f"raid5-tracks (filled-in parity read), {name}")
        ax[1][3].plot(xs, [x["track_aligned_no_fill_mb_s"] for x in rr], "x" + style,
                      color="C2", label=f"raid5-tracks, no fill-in, {name}")
    ax[1][3].set_xscale("log", base=2)
    ax[1][3].set_xlabel("readers (rounds of ~one-track-per-member reads)")
    ax[1][3].set_ylabel("MB/s")
    same = r5["same_unit"]["rounds"]
    ax[1][3].set_title(f"volume engine RAID5 (paper +57 %): 5 units x{r5['rounds'][0]['gain']:.2f},"
                       f"\none unit x5 x{same[0]['gain']:.2f} (1 reader)")
    ax[1][3].legend(fontsize=6)
    rr = r5["rounds"]
    xs = [x["readers"] for x in rr]
    ax[0][4].plot(xs, [x["conventional_mb_s"] for x in rr], "o-",
                  label=f"raid5, {r5['conventional_chunk_sectors']}-sector chunks")
    ax[0][4].plot(xs, [x["track_aligned_mb_s"] for x in rr], "o-",
                  label=f"raid5-tracks equal_offset (~{r5['aligned_mean_chunk_sectors']:.0f}-sector "
                        "stripes)")
    ax[0][4].plot(xs, [x["per_member_mb_s"] for x in rr], "o-",
                  label=f"raid5-tracks per_member (~{r5['per_member_mean_chunk_sectors']:.0f}-sector "
                        f"rows, {r5['per_member_unused_pct']:.1f} % unused)")
    ax[0][4].set_xscale("log", base=2)
    ax[0][4].set_xlabel("readers (rounds of ~one-track-per-member reads)")
    ax[0][4].set_ylabel("MB/s")
    ax[0][4].set_title(f"RAID5, 5 units of differing tracks (paper +57 %):\n"
                       f"per_member x{rr[0]['per_member_gain']:.2f}, equal_offset "
                       f"x{rr[0]['gain']:.2f} (1 reader)")
    ax[0][4].legend(fontsize=6)
    r10 = r["raid10_striping"]
    rr = r10["rounds"]
    xs = [x["readers"] for x in rr]
    ax[1][4].plot(xs, [x["conventional_mb_s"] for x in rr], "o-",
                  label=f"{r10['conventional_chunk_sectors']}-sector chunks")
    ax[1][4].plot(xs, [x["track_aligned_mb_s"] for x in rr], "o-",
                  label=f"raid10-tracks (~{r10['aligned_mean_chunk_sectors']:.0f}-sector rows, "
                        f"{r10['unused_pct']:.1f} % unused)")
    ax[1][4].set_xscale("log", base=2)
    ax[1][4].set_xlabel("readers (rounds of one-chunk reads)")
    ax[1][4].set_ylabel("MB/s")
    ax[1][4].set_title(f"RAID10, 2 pairs of differing mirrors:\n"
                       f"x{rr[0]['gain']:.2f} (1 reader) -> x{rr[-1]['gain']:.2f} (16)")
    ax[1][4].legend(fontsize=6)
    fig.suptitle(f"Track alignment, {r['profile']} unit {r['unit']} (virtual time)")
    fig.tight_layout()
    fig.savefig(RESULTS / "tracks.png", dpi=110)
    summary = {k: r[k] for k in ("aligned_vs_normal_diff",)}
    summary["crossing_ms"] = c["crossing_ms"]
    summary["within_ms"] = c["within_ms"]
    summary["stream_pct"] = s["change_pct"]
    summary["extraction_minutes"] = [round(x["device_minutes"], 1) for x in e]
    summary["striping_gain"] = st["gain"]
    summary["readers"] = [(x["readers"], round(x["conventional_mb_s"], 1),
                           round(x["track_aligned_mb_s"], 1)) for x in st["readers"]]
    summary["volume_readers"] = [(x["readers"], round(x["conventional_mb_s"], 1),
                                  round(x["track_aligned_mb_s"], 1), round(x["gain"], 2))
                                 for x in vr]
    summary["raid5_readers"] = {
        name: [(x["readers"], round(x["conventional_mb_s"], 1), round(x["track_aligned_mb_s"], 1),
                round(x["track_aligned_no_fill_mb_s"], 1), round(x["gain"], 2))
               for x in case["rounds"]]
        for name, case in (("five_units", r5), ("one_unit", r5["same_unit"]))}
    summary["raid5_mean_chunk_sectors"] = round(r5["aligned_mean_chunk_sectors"], 1)
    summary["raid5_per_member"] = {
        "mean_chunk_sectors": round(r5["per_member_mean_chunk_sectors"], 1),
        "unused_pct": round(r5["per_member_unused_pct"], 2),
        "readers": [(x["readers"], round(x["conventional_mb_s"], 1), round(x["per_member_mb_s"], 1),
                     round(x["per_member_gain"], 2)) for x in r5["rounds"]]}
    summary["raid10_readers"] = {
        "mean_chunk_sectors": round(r10["aligned_mean_chunk_sectors"], 1),
        "unused_pct": round(r10["unused_pct"], 2),
        "readers": [(x["readers"], round(x["conventional_mb_s"], 1),
                     round(x["track_aligned_mb_s"], 1), round(x["gain"], 2)) for x in r10["rounds"]]}
    summary["matches_model"] = all(x["matches_model"] for x in e)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
