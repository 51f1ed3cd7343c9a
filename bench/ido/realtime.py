#!/usr/bin/python3
"""IDO in real time (issue 17): a batching standby loses a member of its volume during a batch.

One primary runs a throttled TPC-C-like load (bench/tpcc) on a plain directory; for each
configuration a fresh compact-mode greenreplica standby follows it, its tablespace on its own
agent volume of emulated drives (FUSE -> loop -> ext4, real time): a `raid5-ido-s` volume of 3
array members and the 2-member surrogate pair.  Per configuration:

  1. a batch with nothing failed (greenreplica_batch_now()): the batch's duration without a
     rebuild;
  2. for each entry of --fail-phases (default: apply), after --accumulate seconds of load
     another batch; as soon as greenreplica_status shows that phase, member 1 is failed
     (control op fail_member) and replaced (replace_member): the batch's duration with the
     rebuild running, the rebuild's time (replace -> member in_sync), what the surrogate pair
     wrote.  A compact batch's PREFETCH phase only announces its reads (a few ms); they land
     while APPLY waits for them, so a failure in apply is one while the batch reads;
  3. after --accumulate seconds more, member 1 fails and is replaced again and the standby is
     promoted while that rebuild runs: the measured RTO (promote -> first committed write),
     against greenreplica.rto; then the TPC-C consistency check on the promoted standby.

Configurations:
  ido_hint    rebuild = "ido"; the standby's hint (sent before each batch's prefetch) reaches
              the volume (Volume::hint -> Personality::hint -> the zone table's hinted flags)
  ido_nohint  rebuild = "ido"; through each failure's batch and rebuild the benchmark replaces
              the standby's hint with an empty one every 50 ms (a new hint replaces the last:
              no zone stays hinted for more than that)
  pr          rebuild = "pr": MD's sequential rebuild, nothing redirected to the surrogates

Whether the hint arrived is read from the volume status (`hints`: the extents the volume holds,
which Volume::hint hands to the personality) and the standby's last_batch_hint_extents.  The
IDO personality reports no layout_state, so the zone table's hinted flags themselves are not
visible from outside the agent (the unit tests of zone_table.rs and volume::ido_tests check
them); the benchmark shows the consequence instead (rebuild and batch times, hint on vs off).

Run as root, with the extension installed (in a private namespace, see HELPER-COMMON):
  /work/tools/privns.sh NAME bash -c 'make install && /usr/bin/python3 bench/ido/realtime.py'
Writes bench/results/ido-realtime.json and .png.
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "energy"))
from energy import (PG_BIN, ROOT, TPCC, USER, Agent, Node, as_user, log,  # noqa: E402
                    promote_and_time)

CONFIGS = {"ido_hint": "ido", "ido_nohint": "ido", "pr": "pr"}
STATUS = ("phase", "batches", "coalesce(last_batch_duration_s, 0)", "coalesce(last_batch_prefetch_s, 0)",
          "coalesce(last_batch_apply_s, 0)", "coalesce(last_batch_flush_s, 0)",
          "coalesce(last_batch_hint_extents, 0)", "coalesce(unapplied_bytes, 0)",
          "coalesce(rto_estimate_s, 0)", "coalesce(last_batch_bytes, 0)",
          "coalesce(last_batch_reads_needed, 0)", "coalesce(last_batch_prefetch_ios, 0)")


def template(name, rebuild, args):
    return f"""
[[template]]
name = "{name}"
layout = "raid5-ido-s"
members = 5
member_kind = "emulated-hdd"
member_size = "{args.member_size}"
profile = "{args.profile}"
policy = "cooperative:600"
rebuild_mb_s = {args.rebuild_max}
rebuild_min_mb_s = {args.rebuild_min}
[template.layout_options]
rebuild = "{rebuild}"
epoch_s = 30
"""


def status(node):
    row = node.psql("SELECT " + ", ".join(STATUS) + " FROM greenreplica_status").split("|")
    return {"phase": row[0], "batches": int(row[1]), "duration_s": float(row[2]),
            "prefetch_s": float(row[3]), "apply_s": float(row[4]), "flush_s": float(row[5]),
            "hint_extents": int(row[6]), "unapplied_bytes": int(row[7]), "rto_estimate_s": float(row[8]),
            "wal_bytes": int(row[9]), "reads_needed": int(row[10]), "prefetch_ios": int(row[11])}


def volume(agent, name):
    return agent.request({"op": "volume", "volume": name})["volume"]


def member_health(agent, name, m):
    return volume(agent, name)["members"][m]["health"]["health"]


def wait_batch_done(node, batches, timeout=300):
    """Until greenreplica_status counts more than `batches` completed batches; its last_batch_*
    figures are those of batch number batches + 1 when `exact` (the standby batches every few
    seconds here: polled every 20 ms, a later batch can seldom end first)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            s = status(node)
            if s["batches"] > batches:
                s["exact"] = s["batches"] == batches + 1
                return s
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"no batch finished within {timeout} s")


def wait_phase(node, phases, timeout=60):
    """Poll every 20 ms until the standby is in one of `phases`; returns its status."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            s = status(node)
            if s["phase"] in phases:
                return s
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.02)
    return None


def wait_in_sync(agent, name, m, timeout=600):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if member_health(agent, name, m) == "in_sync":
            return time.time()
        time.sleep(0.1)
    return None


def fail_and_replace(agent, name, m):
    agent.request({"op": "fail_member", "volume": name, "member": m})
    agent.request({"op": "replace_member", "volume": name, "member": m})


def member_io(v, members, key):
    return sum(v["members"][i]["ledger"][key] for i in members)


def clear_hints(agent, name, stop):
    while not stop.is_set():
        try:
            agent.request({"op": "hint", "volume": name, "extents": []})
        except (OSError, RuntimeError):
            pass
        stop.wait(0.05)


def failure_during_batch(name, agent, node, phases, args):
    """A batch (greenreplica_batch_now()); as soon as the standby is in one of `phases`,
    member 1 fails and is replaced. None when the batch never showed those phases."""
    b = status(node)["batches"]
    before = volume(agent, name)
    stop = threading.Event()
    if name == "ido_nohint":
        # The hint off: an empty hint replaces the standby's every 50 ms through the batch
        # and the rebuild (a new hint replaces the last, so no zone stays hinted for long).
        threading.Thread(target=clear_hints, args=(agent, name, stop), daemon=True).start()
    try:
        node.psql("SELECT greenreplica_batch_now()")
        at = wait_phase(node, phases)
        if at is None:
            wait_batch_done(node, b)
            return None
        r = {"failed_in_phase": at["phase"], "volume_hints_at_failure": volume(agent, name)["hints"]}
        if name == "ido_nohint":  # the standby's hint may be younger than the last clearing
            agent.request({"op": "hint", "volume": name, "extents": []})
            r["volume_hints_after_clearing"] = volume(agent, name)["hints"]
        t0 = time.time()
        fail_and_replace(agent, name, 1)
        r["batch"] = wait_batch_done(node, at["batches"])
        r["batch_end_after_failure_s"] = time.time() - t0
        r["batch_ended_before_rebuild"] = member_health(agent, name, 1) != "in_sync"
        t_sync = wait_in_sync(agent, name, 1)
    finally:
        stop.set()
    r["rebuild_s"] = (t_sync - t0) if t_sync else None
    after = volume(agent, name)
    # Surrogate writes: redirected user writes and (IDO) hot zones migrated as the rebuild
    # finishes them; hinted zones count as hot.
    r["surrogate_bytes_written"] = (member_io(after, (3, 4), "bytes_written")
                                    - member_io(before, (3, 4), "bytes_written"))
    r["array_bytes_read"] = (member_io(after, (0, 2), "bytes_read") - member_io(before, (0, 2), "bytes_read"))
    r["layout_metadata_bytes"] = after["layout_metadata_bytes"]
    log(f"  {name}: failed in {at['phase']}, batch {r['batch']['duration_s']:.2f} s "
        f"({r['batch']['wal_bytes'] // 1024} kB WAL, {r['batch']['reads_needed']} reads), "
        f"rebuild {r['rebuild_s']} s, volume hints {r['volume_hints_at_failure']}, "
        f"surrogates wrote {r['surrogate_bytes_written'] >> 20} MiB")
    return r


def run_config(name, agent, work, primary, pts, port, args):
    vts = agent.create_volume(name, name)
    node = Node(work, name, port)
    node.follow(primary, f"{pts}={vts}")
    node.conf(f"""
shared_buffers = {args.shared_buffers}
greenreplica.mode = compact
greenreplica.rto = {args.rto}s
greenreplica.window_size = {args.window}
greenreplica.agent_socket = '{agent.socket}'
greenreplica.agent_volume = '{name}'
""")
    node.start()
    r = {"rebuild": CONFIGS[name]}
    try:
        lsn = primary.psql("SELECT pg_current_wal_lsn()")
        deadline = time.time() + 300
        while node.psql(f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'") != "t":
            if time.time() > deadline:
                raise RuntimeError(f"standby {name} did not catch up")
            time.sleep(0.2)

        # 1. a batch with every member in sync
        time.sleep(args.accumulate)
        b = status(node)["batches"]
        node.psql("SELECT greenreplica_batch_now()")
        r["batch_in_sync"] = wait_batch_done(node, b)
        log(f"  {name}: batch in sync {r['batch_in_sync']}")

        # 2. batches during which member 1 fails and is replaced (one per --fail-phases entry)
        r["failures"] = {}
        for phases in args.fail_phases.split(";"):
            time.sleep(args.accumulate)
            r["failures"][phases] = failure_during_batch(name, agent, node, phases.split(","), args)

        # 3. promotion during a rebuild
        time.sleep(args.accumulate)
        fail_and_replace(agent, name, 1)
        time.sleep(0.5)
        s = status(node)
        r["promoted_in"] = {k: s[k] for k in ("phase", "unapplied_bytes", "rto_estimate_s")}
        r["rto_measured_s"] = promote_and_time(node)
        r["rebuilding_after_promotion"] = member_health(agent, name, 1) != "in_sync"
        r["tpcc_consistent_after_promotion"] = node.tpcc("check", check=False).returncode == 0
        log(f"  {name}: promoted in {s['phase']} ({s['unapplied_bytes'] // 1024} kB unapplied) "
            f"RTO {r['rto_measured_s']:.2f} s, still rebuilding: {r['rebuilding_after_promotion']}")
    finally:
        node.stop("immediate")
    return r


def failures(r):
    """(phase entry, result) of the failures that happened."""
    return [(k, v) for k, v in r["failures"].items() if v]


def plot(out, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = out["configurations"]
    names = list(res)
    entries = out["setup"]["fail_phases"].split(";")
    fig, ax = plt.subplots(1, 4, figsize=(17, 4))
    w = 0.8 / (len(entries) + 1)
    for e, entry in enumerate(entries):
        got = [(res[n]["failures"].get(entry) or {}) for n in names]
        xs = [x + (e + 1) * w for x in range(len(names))]
        ax[0].bar(xs, [g.get("rebuild_s") or 0 for g in got], w, label=f"failed in {entry}")
        ax[1].bar(xs, [(g.get("batch") or {}).get("duration_s", 0) for g in got], w,
                  label=f"member failed in {entry}")
        ax[3].bar(xs, [(g.get("surrogate_bytes_written") or 0) / 2**20 for g in got], w,
                  label=f"failed in {entry}")
    ax[1].bar(range(len(names)), [res[n]["batch_in_sync"]["duration_s"] for n in names], w, label="in sync")
    for a, title in zip(ax[[0, 1, 3]], ("rebuild of member 1 (s)", "batch duration (s)",
                                         "surrogate pair wrote (MiB)")):
        a.set_xticks([x + 0.4 - w / 2 for x in range(len(names))], names)
        a.set_title(title)
        a.legend(fontsize=7)
    ax[2].bar(names, [res[n].get("rto_measured_s") or 0 for n in names], color="tab:red")
    ax[2].axhline(out["setup"]["rto"], color="k", ls="--", label="greenreplica.rto")
    ax[2].set_title("promotion during a rebuild: RTO (s)")
    ax[2].legend(fontsize=7)
    fig.suptitle(f"IDO in real time: raid5-ido-s 3+2 x {out['setup']['member_size']} "
                 f"{out['setup']['profile']}, TPC-C {out['setup']['rate']} tps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="wd1600aajs", help="the drive (the IDO paper's WD1600AAJS)")
    p.add_argument("--member-size", default="256MiB")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--rate", type=int, default=30, help="TPC-C transactions per second on the primary")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rto", type=int, default=30, help="greenreplica.rto, s")
    p.add_argument("--window", default="8MB")
    p.add_argument("--shared-buffers", default="16MB",
                   help="the standby's; below the TPC-C data's size so that batches read the volume")
    p.add_argument("--accumulate", type=int, default=20, help="seconds of load before each step")
    p.add_argument("--fail-phases", default="apply",
                   help="one failure per ';'-separated entry, in a batch phase of the entry's ','-list")
    p.add_argument("--rebuild-min", type=float, default=10, help="rebuild_min_mb_s")
    p.add_argument("--rebuild-max", type=float, default=40, help="rebuild_mb_s")
    p.add_argument("--results", default=str(ROOT / "bench" / "results"))
    args = p.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"realtime: unknown configuration {c!r} (known: {', '.join(CONFIGS)})")
    if os.geteuid() != 0:
        sys.exit("realtime: run as root (the storage agent mounts filesystems)")

    work = Path(tempfile.mkdtemp(prefix="greenreplica-ido-rt."))
    os.chmod(work, 0o755)
    subprocess.run(["chown", f"{USER}:", str(work)], check=True)
    agent = Agent(work, args.profile, 2, 10, args.member_size)
    agent.extra_config = "".join(template(c, CONFIGS[c], args) for c in configs)
    primary = Node(work, "primary", 56300)
    load = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_start = time.time()
    try:
        agent.start()
        as_user(["initdb", "-D", str(primary.data), "-A", "trust", "--no-sync"], capture_output=True)
        primary.conf(f"""
port = {primary.port}
listen_addresses = ''
unix_socket_directories = '{work}'
shared_preload_libraries = 'greenreplica'
wal_level = replica
max_wal_senders = 10
max_wal_size = 1GB
""")
        primary.start()
        pts = work / "primary-ts"
        as_user(["mkdir", "-p", str(pts)])
        primary.psql("CREATE EXTENSION greenreplica")
        primary.psql(f"CREATE TABLESPACE data LOCATION '{pts}'")
        log("primary: TPC-C, 1 warehouse")
        primary.tpcc("init", 1, "data")
        load = subprocess.Popen(["runuser", "-u", USER, "--", "env", f"PATH={PG_BIN}:/usr/bin:/bin",
                                 *[f"{k}={v}" for k, v in primary.env().items()],
                                 "bash", str(TPCC), "run", "3600", str(args.clients), "-R", str(args.rate)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        results = {}
        for i, c in enumerate(configs):
            log(f"configuration {c}")
            results[c] = run_config(c, agent, work, primary, pts, 56301 + i, args)
        out = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
            "setup": {k: v for k, v in vars(args).items() if k != "results"},
            "run_s": time.time() - t_start,
            "configurations": results,
        }
        res = Path(args.results)
        res.mkdir(parents=True, exist_ok=True)
        (res / "ido-realtime.json").write_text(json.dumps(out, indent=2))
        plot(out, res / "ido-realtime.png")
        print_table(out)
    finally:
        if load:
            load.terminate()
            load.wait()
        primary.stop("immediate")
        agent.stop()
        if os.environ.get("KEEP"):
            log(f"kept {work} (KEEP is set)")
        else:
            subprocess.run(["rm", "-rf", str(work)])


def print_table(out):
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print(f"\n{'config':<11} {'failed in':>9} {'rebuild s':>9} {'batch s':>8} {'in sync s':>9} "
          f"{'WAL kB':>7} {'reads':>6} {'hints':>5} {'sur. MiB':>8} {'RTO s':>6} {'TPC-C ok':>8}")
    for n, r in out["configurations"].items():
        for entry, g in failures(r) or [("-", {})]:
            b = g.get("batch", {})
            print(f"{n:<11} {g.get('failed_in_phase', '-'):>9} {f(g.get('rebuild_s'), '>9.1f')} "
                  f"{f(b.get('duration_s'), '>8.2f')} {r['batch_in_sync']['duration_s']:>9.2f} "
                  f"{b.get('wal_bytes', 0) // 1024:>7} {b.get('reads_needed', 0):>6} "
                  f"{g.get('volume_hints_after_clearing', g.get('volume_hints_at_failure', 0)):>5} {(g.get('surrogate_bytes_written') or 0) / 2**20:>8.1f} "
                  f"{f(r.get('rto_measured_s'), '>6.2f')} {str(r.get('tpcc_consistent_after_promotion')):>8}")
    print(f"run {out['run_s']:.0f} s, greenreplica.rto {out['setup']['rto']} s")


if __name__ == "__main__":
    main()
