#!/usr/bin/python3
"""Compaction benchmark: the same recorded window replayed by a stock standby, a tuned stock
standby, a `defer` and two `compact` standbys (the shared-buffers read path and the os_cache one).

For each drive profile: a primary with pgbench tables in a tablespace; five standbys from base
backups of it, each with its tablespace on its own agent volume (RAID10 of two emulated-hdd
members, always on).  Replay is held on every standby alike while the window is recorded, with
recovery_min_apply_delay (replay waits at the window's first commit record); greenreplica's
scheduler is off meanwhile.  `--window fresh` records the window right after a checkpoint
(every first change carries a full-page image: little to read); `--window mid` first runs
pgbench for `--prefix` seconds after a checkpoint, replayed freely by the standbys, and only
then holds replay and records the window: its pages were changed since the checkpoint, so
they carry no images and must be read.  The window ends with a checkpoint on the primary.
`--workload tpcc --warehouses N` records TPC-C-like windows (bench/tpcc) instead of pgbench.
`--trace` gives every standby's volume the agent's per-request I/O trace (MSR CSV): each
read the volume served during the replay is then assigned to a relation file of the standby's
tablespace (by the file's extents, FIEMAP) or to the filesystem itself (metadata, journal),
and the queue depth each member and the volume reached is taken from the requests' overlaps.

`stock` is PostgreSQL's replay without prefetch (recovery_prefetch = off); `stock_tuned` is
what a DBA would pick instead: the recovery prefetcher at full strength (recovery_prefetch =
on, maintenance_io_concurrency = 256, wal_decode_buffer_size = 64MB).  Every standby has the
same shared_buffers and bgwriter settings.  Each standby replays the whole window, one after
the other, once the page cache of its volume is dropped (--evict): a stock one by dropping the
delay and, once caught up, taking the restartpoint (CHECKPOINT: its sorted write-back and fsync, which is what FLUSH does
in a batch); the others in one forced batch (greenreplica_batch_now(), rto and window_size
large enough that the scheduler never starts one by itself).  Reported per standby: R_apl (WAL
bytes / wall time, request to flushed), the batch's wake/prefetch/apply/flush split (from its
log line), reads and bytes served at three layers: the agent's members (ledger), the loop
device under ext4 (/sys/block/loopN/stat) and the standby's processes (/proc/PID/io
read_bytes); the fold figures and prefetch I/O.  Writes bench/results/compaction.json (or
--out) and a PNG beside it.  Run as root.

`compact_os_carry` is `compact_os` with greenreplica.carry_dirty_buffers = on: FLUSH may leave
the batch's dirty buffers in shared_buffers for a later batch.  A run with it gives every
standby what carrying needs (checkpoint_timeout = 1d, max_wal_size = 16GB; it requires
--bgwriter-lru-maxpages 0, and --shared-buffers should be at least four times a batch's
distinct blocks), so that carrying is the only difference from `compact_os`.  `--windows N`
records and replays N consecutive windows, one standby after the other each time; only the
last ends on a checkpoint record, so that a carried write-back shows up (and is paid) in the
last batch's restartpoint, and the figures over all windows (R_apl, bytes written to the
volume from before the first replay to after the last) are the honest ones.
`compact_os_carry_resident` is `compact_os_carry` with greenreplica.debug_prefetch_resident =
on: PREFETCH reads the blocks still in shared_buffers again, as before it left them out (the
read lever, one at a time); `_nopf` adds recovery_prefetch = off to either.
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

ALL_MODES = ("stock", "stock_tuned", "defer", "defer_nopf", "compact", "compact_os", "compact_os_gap0",
             "compact_os_nopf", "compact_os_gap0_nopf", "compact_os_carry", "compact_os_carry_resident",
             "compact_os_carry_nopf", "compact_os_carry_resident_nopf")
MODES = ("stock", "stock_tuned", "defer", "compact", "compact_os")  # --modes changes it
STOCK_MODES = ("stock", "stock_tuned")
GR_MODE = {m: ("defer" if m.startswith("defer") else "compact") for m in ALL_MODES if m not in STOCK_MODES}
# compact_os with greenreplica.carry_dirty_buffers = on: the only difference from compact_os
CARRY_MODES = ("compact_os_carry", "compact_os_carry_resident", "compact_os_carry_nopf",
               "compact_os_carry_resident_nopf")
# compact_os_carry as it was before PREFETCH left out the blocks still in shared_buffers
# (greenreplica.debug_prefetch_resident = on): the read lever, one at a time
RESIDENT_MODES = ("compact_os_carry_resident", "compact_os_carry_resident_nopf")
# What carrying needs (docs/configuration.md), given to every standby of a run that has a
# carrying one, so that only carrying differs between compact_os and compact_os_carry
CARRY_SETTINGS = """checkpoint_timeout = 1d
max_wal_size = 16GB"""
# PostgreSQL 15's recovery prefetcher, counted per standby
PREFETCH_STATS = ("prefetch", "hit", "skip_init", "skip_new", "skip_fpw", "skip_rep")

STATUS = ("batches, phase, last_batch_bytes, last_batch_duration_s, last_batch_records, "
          "last_batch_block_refs, last_batch_distinct_blocks, last_batch_reads_needed, "
          "last_batch_reads_avoided, last_batch_fold_ratio, last_batch_prefetch_ios, "
          "last_batch_prefetch_bytes, last_batch_sequential_share, last_batch_decode_seconds, "
          "last_batch_windows, last_batch_buffers_flushed, last_batch_blocks_cached")


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
    return totals_of_view(node, "greenreplica_status", cols)


def totals_of_view(node, view, cols):
    vals = retry(lambda: node.psql(f"SELECT {', '.join(cols)} FROM {view}")).split("|")
    return {c: int(v or 0) for c, v in zip(cols, vals)}


def member_io(volume):
    return {k: sum(m["ledger"][k] for m in volume["members"]) for k in ("reads", "bytes_read", "writes", "bytes_written")}


def traced_volume(agent, name, profile, member_size, members=2):
    """agent.toml sections for a volume like the "always_on" template's, configured (not
    created over the socket) so that it can carry a trace."""
    mount = agent.work / "volumes" / name
    text = f"""
[[volume]]
name = "{name}"
layout = "raid10"
policy = "always-on"
trace = "{agent.work / f'{name}.trace.csv'}"
[volume.export]
mount_point = "{mount}"
owner = "{energy.USER}"
mode = "0755"
"""
    for i in range(members):
        text += f"""[[volume.member]]
kind = "emulated-hdd"
path = "{agent.work / 'members' / f'{name}-{i}.img'}"
size = "{member_size}"
profile = "{profile}"
"""
    return text


def file_extents(directory):
    """(start byte, end byte, file) of every extent of every file under directory, on the
    filesystem's device (filefrag's FIEMAP, 4 KiB units)."""
    import re
    extents = []
    for f in sorted(Path(directory).rglob("*")):
        if not f.is_file():
            continue
        out = run(["filefrag", "-e", "-b4096", str(f)], capture_output=True).stdout
        for m in re.finditer(r"^\s*\d+:\s*\d+\.\.\s*\d+:\s*(\d+)\.\.\s*(\d+):", out, re.M):
            extents.append((int(m.group(1)) * 4096, (int(m.group(2)) + 1) * 4096, f.name))
    extents.sort()
    return extents


def trace_rows(path, start_byte):
    """The trace's rows after start_byte: (disk, kind, offset, size, start tick, end tick)."""
    rows = []
    with open(path, "rb") as f:
        f.seek(start_byte)
        for line in f.read().decode(errors="replace").splitlines():
            parts = line.split(",")
            if len(parts) != 7 or not parts[0].isdigit():
                continue
            end, disk, kind, off, size, resp = (int(parts[0]), int(parts[2]), parts[3], int(parts[4]),
                                                int(parts[5]), int(parts[6]))
            rows.append((disk, kind, off, size, end - resp, end))
    return rows


def max_overlap(intervals):
    """The most intervals open at once (a request's queue depth at its disk)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    depth = best = 0
    for _, d in events:
        depth += d
        best = max(best, depth)
    return best


def account_trace(rows, extents):
    """Every read the volume served, by where it landed; queue depths reached."""
    import bisect
    starts = [e[0] for e in extents]
    reads = [r for r in rows if r[0] == 0 and r[1] == "Read"]
    acc = {"volume_reads": len(reads), "volume_read_bytes": sum(r[3] for r in reads),
           "relation_file_reads": 0, "relation_file_read_bytes": 0,
           "filesystem_reads": 0, "filesystem_read_bytes": 0,
           "volume_read_sizes": {}, "relation_blocks_read_more_than_once": 0}
    seen = {}
    by_file = {}
    for _, _, off, size, _, _ in reads:
        acc["volume_read_sizes"][str(size)] = acc["volume_read_sizes"].get(str(size), 0) + 1
        i = bisect.bisect_right(starts, off) - 1
        if i >= 0 and extents[i][0] <= off < extents[i][1]:
            acc["relation_file_reads"] += 1
            acc["relation_file_read_bytes"] += size
            by_file[extents[i][2]] = by_file.get(extents[i][2], 0) + 1
            for b in range(off // 8192, (off + size - 1) // 8192 + 1):
                seen[b] = seen.get(b, 0) + 1
        else:
            acc["filesystem_reads"] += 1
            acc["filesystem_read_bytes"] += size
    acc["relation_blocks_read_more_than_once"] = sum(1 for v in seen.values() if v > 1)
    acc["reads_by_file"] = dict(sorted(by_file.items(), key=lambda kv: -kv[1])[:10])
    writes = [r for r in rows if r[0] == 0 and r[1] == "Write"]
    acc["volume_writes"] = len(writes)
    acc["volume_write_bytes"] = sum(r[3] for r in writes)
    disks = sorted({r[0] for r in rows})
    acc["max_queue_depth"] = {("volume" if d == 0 else f"member{d - 1}"): max_overlap(
        [(r[4], r[5]) for r in rows if r[0] == d]) for d in disks}
    return acc


def evict_volume_cache(directory, loop):
    """Drop what the page cache holds of one standby's data volume — its files, the loop
    device and the loop's backing file — and nothing else: a global drop_caches would also
    evict pages another job (or another standby's os_cache PREFETCH) staged."""
    for f in Path(directory).rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    if loop:
        run(["blockdev", "--flushbufs", f"/dev/{loop}"])
        backing = Path(f"/sys/block/{loop}/loop/backing_file")
        if backing.exists():
            fd = os.open(backing.read_text().strip(), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def loop_device_of(directory):
    """The loop device mounted on directory (the volume's ext4), e.g. "loop3"."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if left.split()[4] == str(directory):
            return Path(right.split()[1]).name
    return None


def loop_io(dev):
    """Reads, read bytes, writes, written bytes of a block device (/sys/block/DEV/stat)."""
    f = Path(f"/sys/block/{dev}/stat").read_text().split()
    return {"reads": int(f[0]), "bytes_read": int(f[2]) * 512, "writes": int(f[4]), "bytes_written": int(f[6]) * 512}


def processes_read_bytes(node):
    """read_bytes of every process of the standby (storage fetches they caused)."""
    pid = int((node.data / "postmaster.pid").read_text().split()[0])
    total = 0
    for child in [pid] + [int(c) for c in run(["pgrep", "-P", str(pid)], capture_output=True).stdout.split()]:
        try:
            for line in Path(f"/proc/{child}/io").read_text().splitlines():
                if line.startswith("read_bytes:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


TOTALS = ("total_block_refs", "total_distinct_blocks", "total_reads_avoided",
          "total_prefetch_ios", "total_prefetch_bytes", "window_splits", "batches")
# what FLUSH decided (carrying dirty buffers or writing them back), after each window
WRITE_BACK = ("write_back, carried_dirty_buffers, carried_write_s, last_batch_flush_s, "
              "last_batch_buffers_flushed, restartpoints, last_batch_ended_at_checkpoint")


def batch_lines(node):
    """Every batch log line of the standby so far: wake/prefetch/apply/flush seconds."""
    import re
    text = (node.work / f"{node.name}.log").read_text(errors="replace")
    return [{"wal_bytes": int(b), "wake_s": float(w), "prefetch_s": float(p), "apply_s": float(a),
             "flush_s": float(f), "buffers_written": int(n)}
            for b, w, p, a, f, n in re.findall(
                r"batch applied (\d+) bytes of WAL: wake ([\d.]+) s, prefetch ([\d.]+) s, "
                r"apply ([\d.]+) s, flush ([\d.]+) s, (\d+) buffers written", text)]


def replay_window(args, profile, agent, mode, node, ts, loop, lsn):
    """One standby replays the recorded window up to lsn (a stock one: lift the delay, catch
    up, CHECKPOINT; a batching one: greenreplica_batch_now()) from a cold page cache; its
    figures."""
    run(["sync"])
    if args.evict == "global":
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    else:
        evict_volume_cache(ts, loop)
    start_lsn = node.psql("SELECT pg_last_wal_replay_lsn()")
    wal_bytes = int(node.psql(f"SELECT '{lsn}'::pg_lsn - '{start_lsn}'::pg_lsn"))
    t_before = totals_of(node, TOTALS)
    io_before = member_io(agent.volumes()[mode])
    loop_before = loop_io(loop) if loop else None
    proc_before = processes_read_bytes(node)
    pf_before = totals_of_view(node, "pg_stat_recovery_prefetch", PREFETCH_STATS)
    lines_before = len(batch_lines(node)) if mode not in STOCK_MODES else 0
    trace = agent.work / f"{mode}.trace.csv"
    trace_from = trace.stat().st_size if args.trace and trace.exists() else 0
    extra_batches = 0
    t0 = time.time()
    if mode in STOCK_MODES:
        node.psql("ALTER SYSTEM RESET recovery_min_apply_delay")
        # the reload's signal is sent even when replay, starting at once, cancels the statement
        retry(lambda: node.psql("SELECT pg_reload_conf()"))
        while retry(lambda: node.psql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'")) != "t":
            time.sleep(0.1)
        t_replayed = time.time()
        node.psql("CHECKPOINT")
    else:
        node.psql("SELECT greenreplica_batch_now()")
        # the whole window, however many memory splits (or batches: a window cut at its
        # checkpoint record leaves the rest to another) it takes
        asleep_short = None
        while True:
            done, phase = retry(lambda: node.psql(
                f"SELECT pg_last_wal_replay_lsn() >= '{lsn}', phase FROM greenreplica_status")).split("|")
            if done == "t" and phase == "sleep":
                break
            if phase == "sleep" and done != "t":
                asleep_short = asleep_short or time.time()
                if time.time() - asleep_short > 3:
                    node.psql("SELECT greenreplica_batch_now()")
                    extra_batches += 1
                    asleep_short = None
            else:
                asleep_short = None
            time.sleep(0.1)
    seconds = time.time() - t0
    io_after = member_io(agent.volumes()[mode])
    loop_after = loop_io(loop) if loop else None
    proc_read = processes_read_bytes(node) - proc_before
    pf_after = totals_of_view(node, "pg_stat_recovery_prefetch", PREFETCH_STATS)
    t_after = totals_of(node, TOTALS)
    s = status(node)
    io = {k: io_after[k] - io_before[k] for k in io_after}
    d = {k: t_after[k] - t_before[k] for k in TOTALS}
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
        "data_volume_read_bytes_per_mb_wal": io["bytes_read"] / wal_mb,
        "data_volume_write_bytes_per_mb_wal": io["bytes_written"] / wal_mb,
        "postgres_processes_read_bytes": proc_read,
        "recovery_prefetcher": {k: pf_after[k] - pf_before[k] for k in PREFETCH_STATS},
    }
    if mode in STOCK_MODES:
        r["replay_s"] = t_replayed - t0
        r["checkpoint_s"] = seconds - r["replay_s"]
        # drawn beside the batches: replay as "apply", the restartpoint's CHECKPOINT as "flush"
        r["phases"] = {"wake_s": 0.0, "prefetch_s": 0.0, "apply_s": r["replay_s"], "flush_s": r["checkpoint_s"]}
    else:
        cols = [c.strip() for c in WRITE_BACK.split(",")]
        vals = retry(lambda: node.psql(f"SELECT {WRITE_BACK} FROM greenreplica_status")).split("|")
        r["write_back"] = dict(zip(cols, vals))
        r["batches_started_again"] = extra_batches
    if loop_before:
        r["loop_device"] = {k: loop_after[k] - loop_before[k] for k in loop_after}
    if args.trace:
        time.sleep(1)  # the recorder's buffer is written at the volume's flushes
        r["trace"] = account_trace(trace_rows(trace, trace_from), file_extents(ts))
        log(f"{profile} {mode}: trace {r['trace']['volume_reads']} volume reads "
            f"({r['trace']['relation_file_reads']} in relation files, "
            f"{r['trace']['filesystem_reads']} filesystem), queue depth {r['trace']['max_queue_depth']}")
    if mode not in STOCK_MODES:
        lines = batch_lines(node)[lines_before:]
        r["batch_lines"] = lines
        r["phases"] = ({p: sum(x[p] for x in lines) for p in ("wake_s", "prefetch_s", "apply_s", "flush_s")}
                       if lines else None)
    if mode.startswith("compact"):
        r.update({
            "block_refs": d["total_block_refs"],
            "distinct_blocks": d["total_distinct_blocks"],
            "reads_avoided": d["total_reads_avoided"],
            "fold_ratio": d["total_block_refs"] / max(d["total_distinct_blocks"], 1),
            "prefetch_ios": d["total_prefetch_ios"],
            "prefetch_bytes": d["total_prefetch_bytes"],
            "window_splits": d["window_splits"],
            "reads_needed": d["total_distinct_blocks"] - d["total_reads_avoided"],
            # of the last batch's read set, found in shared_buffers and not read
            "blocks_cached": s["last_batch_blocks_cached"],
            "last_window_sequential_share": s["last_batch_sequential_share"],
            "decode_mb_per_s": (s["last_batch_bytes"] / 1e6 / s["last_batch_decode_seconds"]
                                if s["last_batch_decode_seconds"] else None),
        })
    log(f"{profile} {mode}: {wal_mb:.1f} MB of WAL in {seconds:.1f} s "
        f"(R_apl {r['r_apl_bytes_per_s'] / 1e6:.2f} MB/s), {io['reads']} data-volume reads, "
        f"{io['bytes_written'] / 1e6:.1f} MB written"
        + (f", phases {r['phases']}, {r.get('write_back', '')}" if r.get("phases") else ""))
    return r


def run_profile(args, profile, port):
    work = Path(tempfile.mkdtemp(prefix="greenreplica-compaction."))
    os.chmod(work, 0o755)
    run(["chown", f"{energy.USER}:", str(work)])
    agent = Agent(work, profile, 2, 10, args.member_size)
    if args.fuse_threads:
        agent.agent_options = f"fuse_threads = {args.fuse_threads}\n"
    nodes = []
    try:
        if args.trace:
            (agent.work / "members").mkdir(parents=True, exist_ok=True)
            for mode in MODES:
                (agent.work / "volumes" / mode).mkdir(parents=True, exist_ok=True)
                agent.extra_config += traced_volume(agent, mode, profile, args.member_size)
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
checkpoint_timeout = {"1d" if args.windows > 1 else "30min"}
""")
        primary.start()
        primary.psql("CREATE EXTENSION greenreplica")
        pts = work / "primary_ts"
        as_user(["mkdir", str(pts)])
        primary.psql(f"CREATE TABLESPACE data LOCATION '{pts}'")
        if args.workload == "tpcc":
            primary.tpcc("init", args.warehouses, "data")
        else:
            as_user(["pgbench", "-i", "-q", "-s", str(args.scale), "--tablespace=data", "--index-tablespace=data",
                     "-h", str(work), "-p", str(port), "postgres"], capture_output=True)

        def workload(seconds):
            if args.workload == "tpcc":
                primary.tpcc("run", seconds, args.clients)
            else:
                as_user(["pgbench", "-n", "-T", str(seconds), "-c", str(args.clients), "-h", str(work),
                         "-p", str(port), "postgres"], capture_output=True)
        standbys = {}
        node_ts = {}
        gap, reposition_ms, media_mb_s = energy.break_even_gap(profile)
        log(f"{profile}: break-even gap {gap} blocks (reposition {reposition_ms:.1f} ms, media {media_mb_s:.0f} MB/s)")
        for i, mode in enumerate(MODES):
            if args.trace:
                mount = agent.work / "volumes" / mode
                for _ in range(300):
                    if energy.subprocess.run(["findmnt", str(mount)], capture_output=True).returncode == 0:
                        break
                    time.sleep(0.2)
                as_user(["mkdir", "-p", str(mount / "ts")])
                vts = mount / "ts"
            else:
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
bgwriter_lru_maxpages = {args.bgwriter_lru_maxpages}
greenreplica.mode = off
greenreplica.rto = 604800s
greenreplica.window_size = 1TB
greenreplica.max_apply_delay = 0
{energy.TUNED_STOCK if mode == "stock_tuned" else ""}
{"recovery_prefetch = off" if mode == "stock" or mode.endswith("_nopf") else ""}
{"greenreplica.prefetch_method = os_cache" if mode.startswith("compact_os") else ""}
greenreplica.prefetch_merge_gap = {0 if mode.startswith("compact_os_gap0") else gap}
{CARRY_SETTINGS if any(m in CARRY_MODES for m in MODES) else ""}
{"greenreplica.carry_dirty_buffers = on" if mode in CARRY_MODES else ""}
{"greenreplica.debug_prefetch_resident = on" if mode in RESIDENT_MODES else ""}
""")
            as_user(["touch", str(node.data / "standby.signal")])
            node.start()
            nodes.append(node)
            standbys[mode] = node
            node_ts[mode] = vts

        def hold_replay():
            # recovery_min_apply_delay holds every standby alike, at the next commit record
            for node in standbys.values():
                node.psql("ALTER SYSTEM SET recovery_min_apply_delay = '1d'")
                node.psql("SELECT pg_reload_conf()")

        # With several windows the batching standbys replay the prefix in a batch of their own
        # (a warm-up, not measured): their scheduler then took the restartpoint of the prefix's
        # checkpoint itself and knows when, as in a steady state.  A scheduler that has not seen
        # a restartpoint since it started counts one as due (docs/configuration.md), and one
        # taken behind its back (the CHECKPOINT below) still looks owed: either way its first
        # batch would write back whatever carry_dirty_buffers says.
        warm_up = args.windows > 1
        if warm_up:
            for mode, node in standbys.items():
                if mode not in STOCK_MODES:
                    node.psql(f"ALTER SYSTEM SET greenreplica.mode = '{GR_MODE[mode]}'")
                    node.psql("SELECT pg_reload_conf()")
                    while node.psql("SELECT phase FROM greenreplica_status") != "sleep":
                        time.sleep(0.2)
        if args.window == "mid":
            primary.psql("CHECKPOINT")
            log(f"{profile}: mid-cycle: {args.workload} for {args.prefix} s after a checkpoint, "
                + ("a warm-up batch on the batching standbys" if warm_up else "replayed freely"))
            workload(args.prefix)
            lsn = primary.psql("SELECT pg_current_wal_lsn()")
            for mode, node in standbys.items():
                if warm_up and mode not in STOCK_MODES:
                    while retry(lambda: node.psql(f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'")) != "t":
                        time.sleep(0.2)
                    node.psql("SELECT greenreplica_batch_now()")
                    while retry(lambda: node.psql(
                            f"SELECT pg_last_wal_replay_lsn() >= '{lsn}' AND phase = 'sleep' "
                            "FROM greenreplica_status")) != "t":
                        time.sleep(0.2)
                    wb = retry(lambda: node.psql(f"SELECT {WRITE_BACK} FROM greenreplica_status"))
                    log(f"{profile} {mode}: warm-up batch done: {wb}")
                while retry(lambda: node.psql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'")) != "t":
                    time.sleep(0.5)
            # what the prefix left dirty is written now, not in the measured replay
            for node in standbys.values():
                node.psql("CHECKPOINT")
        hold_replay()

        loops = {mode: loop_device_of(agent.work / "volumes" / mode) for mode in MODES}
        log(f"{profile}: loop devices {loops}; read_ahead_kb "
            f"{ {m: Path(f'/sys/block/{d}/queue/read_ahead_kb').read_text().strip() for m, d in loops.items() if d} }")
        if args.read_ahead_kb is not None:
            for d in loops.values():
                if d:
                    Path(f"/sys/block/{d}/queue/read_ahead_kb").write_text(f"{args.read_ahead_kb}\n")
        run(["sync"])
        ledger_start = {mode: member_io(agent.volumes()[mode]) for mode in MODES}
        windows = []
        for k in range(args.windows):
            last = k == args.windows - 1
            if k > 0:
                # the batching standbys are held by their scheduler (asleep); the stock ones
                # again by the delay, at the next commit record
                for mode in STOCK_MODES:
                    if mode in standbys:
                        standbys[mode].psql("ALTER SYSTEM SET recovery_min_apply_delay = '1d'")
                        standbys[mode].psql("SELECT pg_reload_conf()")
            log(f"{profile}: recording window {k + 1}/{args.windows}: {args.workload} for {args.record} s")
            workload(args.record)
            if last:
                # The last window ends on a checkpoint record, so that every standby's write-back is a
                # restartpoint's: the stock standby's CHECKPOINT and a batch's FLUSH do the same work.
                # Earlier windows end without one (mid-cycle: no restartpoint is due there).
                primary.psql("CHECKPOINT")
            lsn = primary.psql("SELECT pg_current_wal_lsn()")
            for node in standbys.values():
                while retry(lambda: node.psql(f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'")) != "t":
                    time.sleep(0.2)
            if k == 0:
                # Hand the batching standbys to the scheduler (it holds replay from here on), then
                # lift the delay everywhere but on the stock standbys, whose lift starts their replay.
                for mode, node in standbys.items():
                    if mode in STOCK_MODES:
                        continue
                    node.psql(f"ALTER SYSTEM SET greenreplica.mode = '{GR_MODE[mode]}'")
                    node.psql("SELECT pg_reload_conf()")
                    while node.psql("SELECT phase FROM greenreplica_status") != "sleep":
                        time.sleep(0.2)
                    node.psql("ALTER SYSTEM RESET recovery_min_apply_delay")
                    node.psql("SELECT pg_reload_conf()")
            results = {mode: replay_window(args, profile, agent, mode, node, node_ts[mode], loops.get(mode), lsn)
                       for mode, node in standbys.items()}
            rate = {m: results[m]["r_apl_bytes_per_s"] for m in MODES}
            results["window_ends_on_checkpoint"] = last
            results["r_apl_over_stock_tuned"] = {m: rate[m] / rate["stock_tuned"] for m in MODES}
            results["r_apl_over_defer"] = {m: rate[m] / rate["defer"] for m in MODES if "defer" in rate}
            windows.append(results)
        # Whatever a batching standby still carries after the last window is written now, with
        # the restartpoint its last window's checkpoint record allows, and charged to that window.
        for mode, node in standbys.items():
            if mode in STOCK_MODES:
                continue
            last_w = windows[-1][mode]
            carried = int(last_w["write_back"]["carried_dirty_buffers"] or 0)
            last_w["deferred_write_back_s"] = 0.0
            if carried > 0:
                io_before = member_io(agent.volumes()[mode])
                t0 = time.time()
                node.psql("CHECKPOINT")
                last_w["deferred_write_back_s"] = time.time() - t0
                io_after = member_io(agent.volumes()[mode])
                last_w["deferred_write_back_bytes"] = io_after["bytes_written"] - io_before["bytes_written"]
                last_w["batch_seconds"] += last_w["deferred_write_back_s"]
                last_w["r_apl_bytes_per_s"] = last_w["wal_bytes"] / last_w["batch_seconds"]
                log(f"{profile} {mode}: {carried} buffers still carried after the last window, "
                    f"written by a CHECKPOINT in {last_w['deferred_write_back_s']:.1f} s (charged to it)")
        if args.windows == 1:
            results = windows[0]
            results["break_even_gap_blocks"] = gap
            return results
        # Over all windows: every standby ends written back (the last window's restartpoint),
        # so the sum is the honest figure for a carrying standby (its deferred writes included).
        run(["sync"])
        time.sleep(1)
        results = {"break_even_gap_blocks": gap, "windows": windows}
        for mode in MODES:
            ws = [w[mode] for w in windows]
            ledger = member_io(agent.volumes()[mode])
            written = ledger["bytes_written"] - ledger_start[mode]["bytes_written"]
            wal = sum(w["wal_bytes"] for w in ws)
            secs = sum(w["batch_seconds"] for w in ws)
            r = {"wal_bytes": wal, "batch_seconds": secs, "r_apl_bytes_per_s": wal / secs,
                 "r_apl_per_window_bytes_per_s": [w["r_apl_bytes_per_s"] for w in ws],
                 "data_volume_write_bytes_all_windows": written,
                 "data_volume_write_bytes_per_mb_wal": written / (wal / 1e6),
                 "data_volume_writes_all_windows": ledger["writes"] - ledger_start[mode]["writes"],
                 "data_volume_read_bytes_per_mb_wal": sum(w["data_volume_read_bytes"] for w in ws) / (wal / 1e6)}
            if all(w.get("phases") for w in ws):
                r["phases"] = {p: sum(w["phases"][p] for w in ws)
                               for p in ("wake_s", "prefetch_s", "apply_s", "flush_s")}
            results[mode] = r
            log(f"{profile} {mode}: {args.windows} windows, {wal / 1e6:.1f} MB of WAL in {secs:.1f} s "
                f"(R_apl {r['r_apl_bytes_per_s'] / 1e6:.2f} MB/s), "
                f"{written / 1e6:.1f} MB written to the volume ({r['data_volume_write_bytes_per_mb_wal'] / 1e6:.2f} MB per MB of WAL)")
        rate = {m: results[m]["r_apl_bytes_per_s"] for m in MODES}
        results["r_apl_over_stock_tuned"] = {m: rate[m] / rate["stock_tuned"] for m in MODES}
        results["r_apl_over_defer"] = {m: rate[m] / rate["defer"] for m in MODES if "defer" in rate}
        return results
    finally:
        for node in reversed(nodes):
            node.stop("immediate")
        # keep the servers' logs for a look after a failure
        keep = Path(tempfile.gettempdir()) / f"greenreplica-compaction-logs-{args.out}-{profile}"
        keep.mkdir(exist_ok=True)
        for f in [*work.glob("*.log"), *(work / "agent").glob("*.trace.csv")]:
            run(["cp", str(f), str(keep)])
        agent.stop()
        run(["bash", str(ROOT / "scripts" / "test-agent.sh"), "stop", str(agent.work)], capture_output=True)
        run(["rm", "-rf", str(work)])


def plot(out, png):
    """R_apl per standby and, for the batching ones, where the batch's time went."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    setup = out["setup"]
    profiles = list(out["profiles"])
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(MODES)
    for j, mode in enumerate(MODES):
        vals = [out["profiles"][pr][mode]["r_apl_bytes_per_s"] / 1e6 for pr in profiles]
        bars = ax.bar([x + width * j for x in range(len(profiles))], vals, width=width, label=mode)
        for b, pr in zip(bars, profiles):
            ratio = out["profiles"][pr]["r_apl_over_stock_tuned"][mode]
            ax.annotate(f"{b.get_height():.2f}\n×{ratio:.1f}", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks([x + width * (len(MODES) - 1) / 2 for x in range(len(profiles))])
    ax.set_xticklabels(profiles)
    ax.set_ylabel("R_apl (MB of WAL per second, request to flushed)")
    load = (f"TPC-C {setup['warehouses']} warehouses" if setup.get("workload") == "tpcc"
            else f"pgbench scale {setup['scale']}")
    ax.set_title(f"{setup['window']} window{' ×%d' % setup['windows'] if setup.get('windows', 1) > 1 else ''}, {load}, {setup['record']} s, "
                 f"shared_buffers {setup['shared_buffers']} (×: over stock_tuned)", fontsize=8)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # room for the legend above the bars
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    labels, bottoms = [], []
    for pr in profiles:
        for mode in [m for m in MODES if m not in STOCK_MODES or out["profiles"][pr].get("windows")]:
            ws = out["profiles"][pr].get("windows")
            for k, w in enumerate(ws or [out["profiles"][pr]]):
                labels.append(f"{mode}\n{pr.split('-')[0]}" + (f" w{k + 1}" if ws else ""))
                x = w[mode]
                bottoms.append(x.get("phases") or ({"apply_s": x["replay_s"], "flush_s": x["checkpoint_s"]}
                                                   if "replay_s" in x else {}))
    base = [0.0] * len(labels)
    for part in ("wake_s", "prefetch_s", "apply_s", "flush_s"):
        vals = [b.get(part, 0.0) for b in bottoms]
        bx.bar(range(len(labels)), vals, bottom=base, label=part[:-2])
        base = [x + v for x, v in zip(base, vals)]
    bx.set_xticks(range(len(labels)))
    bx.set_xticklabels(labels, fontsize=7 if len(labels) <= 5 else 6, rotation=0 if len(labels) <= 5 else 35,
                       ha="center" if len(labels) <= 5 else "right")
    bx.set_ylabel("seconds of the batch")
    bx.set_title("where the batch's time went" + (" (stock: replay=apply, CHECKPOINT=flush)"
                  if any(out["profiles"][pr].get("windows") for pr in profiles) else ""), fontsize=8)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    global MODES
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", default="ultrastar-36z15,deskstar-t7k250")
    p.add_argument("--workload", choices=("pgbench", "tpcc"), default="pgbench")
    p.add_argument("--scale", type=int, default=10, help="pgbench scale of the primary")
    p.add_argument("--warehouses", type=int, default=4, help="tpcc: warehouses of the primary")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--member-size", default="4GiB")
    p.add_argument("--port-base", type=int, default=56300, help="primary's port (runs side by side differ)")
    p.add_argument("--evict", choices=("volume", "global"), default="volume",
                   help="before each replay, drop the page cache of that standby's volume only "
                        "(files, loop device, its backing file) or all of it (drop_caches)")
    p.add_argument("--fuse-threads", type=int, default=None,
                   help="the agent's FUSE threads (its default: 8), a bound on the requests in flight "
                        "at each volume")
    p.add_argument("--trace", action="store_true",
                   help="trace every volume's requests and account for each read it served")
    p.add_argument("--record", type=int, default=60, help="seconds of pgbench that make the window")
    p.add_argument("--shared-buffers", default="256MB")
    p.add_argument("--window", choices=("fresh", "mid"), default="fresh",
                   help="fresh: right after a checkpoint; mid: after --prefix s of pgbench since one")
    p.add_argument("--prefix", type=int, default=30, help="mid: seconds of pgbench before the window")
    p.add_argument("--bgwriter-lru-maxpages", type=int, default=100)
    p.add_argument("--read-ahead-kb", type=int, default=128,
                   help="readahead of every volume's loop device (a reused loop device may keep another)")
    p.add_argument("--windows", type=int, default=1,
                   help="consecutive windows replayed one after the other (only the last ends on a "
                        "checkpoint record): a carrying standby's deferred write-back shows in a later one")
    p.add_argument("--out", default="compaction", help="results name under bench/results")
    p.add_argument("--plot-only", action="store_true", help="only redraw the PNG of an earlier --out")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"standbys to compare, of {', '.join(ALL_MODES)} (compact_os_gap0: os_cache merging "
                        "adjacent blocks only, to tell the gap merging from the rest)")
    args = p.parse_args()
    MODES = tuple(m for m in args.modes.split(",") if m in ALL_MODES)
    if "stock_tuned" not in MODES:
        p.error("--modes must include stock_tuned (the baseline)")
    if args.windows > 1 and args.window != "mid":
        p.error("--windows > 1 needs --window mid (its prefix is the batching standbys' warm-up)")
    if any(m in CARRY_MODES for m in MODES) and args.bgwriter_lru_maxpages != 0:
        p.error("carrying needs --bgwriter-lru-maxpages 0 (given to every standby alike)")
    res = ROOT / "bench" / "results"
    if args.plot_only:
        out = json.loads((res / f"{args.out}.json").read_text())
        MODES = tuple(m for m in ALL_MODES if m in next(iter(out["profiles"].values())))
        plot(out, res / f"{args.out}.png")
        return
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
           "setup": vars(args), "profiles": {}}
    for i, profile in enumerate(args.profiles.split(",")):
        out["profiles"][profile] = run_profile(args, profile, args.port_base + 10 * i)
        (res / f"{args.out}.json").write_text(json.dumps(out, indent=2))  # each profile as it ends
    log(f"results: {res / (args.out + '.json')}")

    plot(out, res / f"{args.out}.png")
    for pr, r in out["profiles"].items():
        print(pr + ": R_apl over tuned stock " +
              ", ".join(f"{m} {v:.2f}" for m, v in r["r_apl_over_stock_tuned"].items()) +
              "; read per MB of WAL " +
              ", ".join(f"{m} {r[m]['data_volume_read_bytes_per_mb_wal'] / 8192:.1f} blocks" for m in MODES))


if __name__ == "__main__":
    main()
