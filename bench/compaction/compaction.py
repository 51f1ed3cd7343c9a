#!/usr/bin/python3
"""Compaction benchmark: the same recorded window replayed by a tuned stock standby, a `defer`
and a `compact` standby.

For each drive profile: a primary with pgbench tables in a tablespace; three standbys from base
backups of it, each with its tablespace on its own agent volume (RAID10 of two emulated-hdd
members, always on), all holding replay (paused by hand) while a pgbench run writes the
window, which ends with a checkpoint on the primary.  The stock standby is what a DBA would
pick instead: PostgreSQL 15's recovery prefetcher at full strength (recovery_prefetch = on,
maintenance_io_concurrency = 256, wal_decode_buffer_size = 64MB), the same shared_buffers.
Caches are dropped, then each standby replays the whole window, one after the other: the
stock one by resuming replay and, once caught up, taking the restartpoint (CHECKPOINT: its
sorted write-back and fsync, which is what FLUSH does in a batch); the others in one forced
batch.  Reported per standby: R_apl (WAL bytes / batch time, wake
to end of flush), data-volume reads per MB of WAL and read bytes (agent ledger), the fold
figures, prefetch I/O and its sequential share, decode throughput.  Writes
bench/results/compaction.json and compaction.png.  Run as root.
"""
import argparse
import datetime
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("energy", ROOT / "bench" / "energy" / "energy.py")
energy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(energy)
log, as_user, run, Agent, Node = energy.log, energy.as_user, energy.run, energy.Agent, energy.Node

MODES = ("stock_tuned", "defer", "compact")

STATUS = ("batches, phase, last_batch_bytes, last_batch_duration_s, last_batch_records, "
          "last_batch_block_refs, last_batch_distinct_blocks, last_batch_reads_needed, "
          "last_batch_reads_avoided, last_batch_fold_ratio, last_batch_prefetch_ios, "
          "last_batch_prefetch_bytes, last_batch_sequential_share, last_batch_decode_seconds, "
          "last_batch_windows, last_batch_buffers_flushed")


def status(node):
    """The standby's batch figures.  A query during APPLY can be cancelled by a recovery
    conflict (the WAL being applied arrived long ago, so max_standby_streaming_delay is
    already spent): try again."""
    cols = [c.strip() for c in STATUS.split(",")]
    for _ in range(600):
        try:
            vals = node.psql(f"SELECT {STATUS} FROM greenreplica_status").split("|")
            break
        except energy.subprocess.CalledProcessError:
            time.sleep(0.1)
    else:
        raise RuntimeError("the standby's status stayed unreadable for a minute")
    out = {}
    for c, v in zip(cols, vals):
        try:
            out[c] = float(v) if "." in v or "e" in v else int(v)
        except ValueError:
            out[c] = v or None
    return out


def retry(fn):
    """fn(), again while a recovery conflict cancels the query (see status())."""
    for _ in range(600):
        try:
            return fn()
        except energy.subprocess.CalledProcessError:
            time.sleep(0.1)
    raise RuntimeError("the standby stayed unreadable for a minute")


def totals_of(node, cols):
    vals = retry(lambda: node.psql(f"SELECT {', '.join(cols)} FROM greenreplica_status")).split("|")
    return {c: int(v or 0) for c, v in zip(cols, vals)}


def member_io(volume):
    return {k: sum(m["ledger"][k] for m in volume["members"]) for k in ("reads", "bytes_read", "writes", "bytes_written")}


def run_profile(args, profile, port):
    work = Path(tempfile.mkdtemp(prefix="greenreplica-compaction."))
    os.chmod(work, 0o755)
    run(["chown", f"{energy.USER}:", str(work)])
    agent = Agent(work, profile, 2, 10, "4GiB")
    nodes = []
    try:
        agent.start()
        primary = Node(work, "primary", port)
        nodes.append(primary)
        as_user(["initdb", "-D", str(primary.data), "-A", "trust", "--no-sync"], capture_output=True)
        primary.conf(f"""
port = {port}
listen_addresses = ''
unix_socket_directories = '{work}'
shared_preload_libraries = 'greenreplica'
wal_level = replica
max_wal_senders = 10
max_wal_size = 4GB
checkpoint_timeout = 30min
""")
        primary.start()
        primary.psql("CREATE EXTENSION greenreplica")
        pts = work / "primary_ts"
        as_user(["mkdir", str(pts)])
        primary.psql(f"CREATE TABLESPACE data LOCATION '{pts}'")
        as_user(["pgbench", "-i", "-q", "-s", str(args.scale), "--tablespace=data", "--index-tablespace=data",
                 "-h", str(work), "-p", str(port), "postgres"], capture_output=True)
        standbys = {}
        for i, mode in enumerate(MODES):
            vts = agent.create_volume(mode, "always_on")
            node = Node(work, mode, port + 1 + i)
            as_user(["pg_basebackup", "-h", str(work), "-p", str(port), "-D", str(node.data), "-X", "stream",
                     "--checkpoint=fast", "--no-sync", "-T", f"{pts}={vts}", "-C", "-S", mode],
                    capture_output=True)
            node.conf(f"""
port = {node.port}
primary_conninfo = 'host={work} port={port} application_name={mode}'
primary_slot_name = '{mode}'
shared_buffers = {args.shared_buffers}
greenreplica.mode = off
greenreplica.rto = 604800s
greenreplica.window_size = 1TB
{energy.TUNED_STOCK if mode == "stock_tuned" else ""}
""")
            as_user(["touch", str(node.data / "standby.signal")])
            node.start()
            nodes.append(node)
            standbys[mode] = node
            # Hold replay by hand while the window is recorded: in defer or compact mode the
            # scheduler would replay continuously while pgbench outruns the default R_apl.
            while node.psql("SELECT phase FROM greenreplica_status") != "off":
                time.sleep(0.2)
            node.psql("SELECT pg_wal_replay_pause()")

        log(f"{profile}: recording a window: pgbench for {args.record} s")
        as_user(["pgbench", "-n", "-T", str(args.record), "-c", "2", "-h", str(work), "-p", str(port), "postgres"],
                capture_output=True)
        # The window ends on a checkpoint record, so that every standby's write-back is a
        # restartpoint's: the stock standby's CHECKPOINT and a batch's FLUSH do the same work.
        primary.psql("CHECKPOINT")
        lsn = primary.psql("SELECT pg_current_wal_lsn()")
        for node in standbys.values():
            while node.psql(f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'") != "t":
                time.sleep(0.2)
        # Let the WAL generation rate's average (30 s) decay, then hand replay to the scheduler.
        time.sleep(90)
        for mode, node in standbys.items():
            if mode == "stock_tuned":
                continue
            node.psql(f"ALTER SYSTEM SET greenreplica.mode = '{mode}'")
            node.psql("SELECT pg_reload_conf()")
            while node.psql("SELECT phase FROM greenreplica_status") != "sleep":
                time.sleep(0.2)

        results = {}
        totals = ("total_block_refs", "total_distinct_blocks", "total_reads_avoided",
                  "total_prefetch_ios", "total_prefetch_bytes", "window_splits", "batches")
        for mode, node in standbys.items():
            run(["sync"])
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            start_lsn = node.psql("SELECT pg_last_wal_replay_lsn()")
            wal_bytes = int(node.psql(f"SELECT '{lsn}'::pg_lsn - '{start_lsn}'::pg_lsn"))
            t_before = totals_of(node, totals)
            io_before = member_io(agent.volumes()[mode])
            t0 = time.time()
            if mode == "stock_tuned":
                node.psql("SELECT pg_wal_replay_resume()")
                while node.psql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'") != "t":
                    time.sleep(0.1)
                node.psql("CHECKPOINT")
            else:
                node.psql("SELECT greenreplica_batch_now()")
                # the whole window, however many memory splits it takes
                while not retry(lambda: node.psql(
                        f"SELECT pg_last_wal_replay_lsn() >= '{lsn}' AND phase = 'sleep' "
                        "FROM greenreplica_status") == "t"):
                    time.sleep(0.1)
            seconds = time.time() - t0
            io_after = member_io(agent.volumes()[mode])
            t_after = totals_of(node, totals)
            s = status(node)
            io = {k: io_after[k] - io_before[k] for k in io_after}
            d = {k: t_after[k] - t_before[k] for k in totals}
            wal_mb = wal_bytes / 1e6
            r = {
                "wal_bytes": wal_bytes,
                "batch_seconds": seconds,
                "r_apl_bytes_per_s": wal_bytes / seconds,
                "batches": d["batches"],
                "data_volume_reads": io["reads"],
                "data_volume_reads_per_mb_wal": io["reads"] / wal_mb,
                "data_volume_read_bytes": io["bytes_read"],
                "data_volume_writes": io["writes"],
                "data_volume_write_bytes": io["bytes_written"],
            }
            if mode == "compact":
                r.update({
                    "block_refs": d["total_block_refs"],
                    "distinct_blocks": d["total_distinct_blocks"],
                    "reads_avoided": d["total_reads_avoided"],
                    "fold_ratio": d["total_block_refs"] / max(d["total_distinct_blocks"], 1),
                    "prefetch_ios": d["total_prefetch_ios"],
                    "prefetch_bytes": d["total_prefetch_bytes"],
                    "window_splits": d["window_splits"],
                    "last_window_sequential_share": s["last_batch_sequential_share"],
                    "decode_mb_per_s": (s["last_batch_bytes"] / 1e6 / s["last_batch_decode_seconds"]
                                        if s["last_batch_decode_seconds"] else None),
                })
            results[mode] = r
            log(f"{profile} {mode}: {wal_mb:.1f} MB of WAL in {seconds:.1f} s "
                f"(R_apl {r['r_apl_bytes_per_s'] / 1e6:.2f} MB/s), {io['reads']} data-volume reads")
        rate = {m: results[m]["r_apl_bytes_per_s"] for m in MODES}
        results["r_apl_ratio"] = rate["compact"] / rate["defer"]
        results["r_apl_compact_over_stock_tuned"] = rate["compact"] / rate["stock_tuned"]
        results["r_apl_defer_over_stock_tuned"] = rate["defer"] / rate["stock_tuned"]
        return results
    finally:
        for node in reversed(nodes):
            node.stop("immediate")
        # keep the servers' logs for a look after a failure
        keep = Path(tempfile.gettempdir()) / f"greenreplica-compaction-logs-{profile}"
        keep.mkdir(exist_ok=True)
        for f in work.glob("*.log"):
            run(["cp", str(f), str(keep)])
        agent.stop()
        run(["bash", str(ROOT / "scripts" / "test-agent.sh"), "stop", str(agent.work)], capture_output=True)
        run(["rm", "-rf", str(work)])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default="ultrastar-36z15,deskstar-t7k250")
    p.add_argument("--scale", type=int, default=10, help="pgbench scale of the primary")
    p.add_argument("--record", type=int, default=60, help="seconds of pgbench that make the window")
    p.add_argument("--shared-buffers", default="256MB")
    args = p.parse_args()
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
           "setup": vars(args), "profiles": {}}
    for i, profile in enumerate(args.profiles.split(",")):
        out["profiles"][profile] = run_profile(args, profile, 56300 + 10 * i)
    res = ROOT / "bench" / "results"
    (res / "compaction.json").write_text(json.dumps(out, indent=2))
    log(f"results: {res / 'compaction.json'}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    profiles = list(out["profiles"])
    width = 0.8 / len(MODES)
    for j, mode in enumerate(MODES):
        vals = [out["profiles"][pr][mode]["r_apl_bytes_per_s"] / 1e6 for pr in profiles]
        bars = ax.bar([x + width * j for x in range(len(profiles))], vals, width=width, label=mode)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.1f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks([x + width * (len(MODES) - 1) / 2 for x in range(len(profiles))])
    ax.set_xticklabels(profiles)
    ax.set_ylabel("R_apl (MB of WAL per second, wake to flushed)")
    ax.set_title(f"One recorded window replayed by tuned stock, defer and compact standbys (pgbench scale {args.scale}, "
                 f"{args.record} s)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(res / "compaction.png", dpi=110)
    for pr, r in out["profiles"].items():
        print(f"{pr}: R_apl compact/defer = {r['r_apl_ratio']:.2f}, compact/tuned stock = "
              f"{r['r_apl_compact_over_stock_tuned']:.2f}, defer/tuned stock = "
              f"{r['r_apl_defer_over_stock_tuned']:.2f}; reads per MB of WAL "
              f"defer {r['defer']['data_volume_reads_per_mb_wal']:.1f}, compact "
              f"{r['compact']['data_volume_reads_per_mb_wal']:.1f}; decode "
              f"{r['compact'].get('decode_mb_per_s') or 0:.0f} MB/s")


if __name__ == "__main__":
    main()
