#!/usr/bin/python3
"""IDO in real time (issue 17): a batching standby loses a member of its volume during a batch.

One primary runs a throttled TPC-C-like load (bench/tpcc) on a plain directory; for each
configuration a fresh compact-mode greenreplica standby follows it, its tablespace on its own
agent volume of emulated drives (FUSE -> loop -> ext4, real time): a `raid5-ido-s` volume of 3
array members and the 2-member surrogate pair.  Per configuration:

  1. a batch with nothing failed (greenreplica_batch_now()): the batch's duration without a
     rebuild;
  2. after --accumulate seconds of load, another batch; as soon as greenreplica_status shows
     the --fail-phase, member 1 is failed (control op fail_member) and replaced
     (replace_member): the batch's duration with the rebuild running, and the rebuild's time
     (replace -> member in_sync);
  3. after --accumulate seconds more, member 1 fails and is replaced again and the standby is
     promoted while that rebuild runs: the measured RTO (promote -> first committed write),
     against greenreplica.rto; then the TPC-C consistency check on the promoted standby.

Configurations:
  ido_hint    rebuild = "ido"; the standby's hint (sent before each batch's prefetch) reaches
              the volume (Volume::hint -> Personality::hint -> the zone table's hinted flags)
  ido_nohint  rebuild = "ido"; the benchmark replaces the hint with an empty one right before
              the failure (a new hint replaces the last: no zone stays hinted)
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "energy"))
from energy import (PG_BIN, ROOT, TPCC, USER, Agent, Node, as_user, log,  # noqa: E402
                    promote_and_time)

CONFIGS = {"ido_hint": "ido", "ido_nohint": "ido", "pr": "pr"}
STATUS = ("phase", "batches", "coalesce(last_batch_duration_s, 0)", "coalesce(last_batch_prefetch_s, 0)",
          "coalesce(last_batch_apply_s, 0)", "coalesce(last_batch_flush_s, 0)",
          "coalesce(last_batch_hint_extents, 0)", "coalesce(unapplied_bytes, 0)",
          "coalesce(rto_estimate_s, 0)")


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
            "hint_extents": int(row[6]), "unapplied_bytes": int(row[7]), "rto_estimate_s": float(row[8])}


def volume(agent, name):
    return agent.request({"op": "volume", "volume": name})["volume"]


def member_health(agent, name, m):
    return volume(agent, name)["members"][m]["health"]["health"]


def wait_batch_done(node, batches, timeout=300):
    """Until greenreplica_status counts more than `batches` and the standby is asleep again."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            s = status(node)
            if s["batches"] > batches and s["phase"] in ("sleep", "continuous"):
                return s
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no batch finished within {timeout} s")


def wait_phase(node, phases, timeout=120):
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


def surrogate_writes(v):
    return sum(v["members"][i]["ledger"]["writes"] for i in (3, 4))


def run_config(name, agent, work, primary, pts, port, args):
    vts = agent.create_volume(name, name)
    node = Node(work, name, port)
    as_user(["pg_basebackup", "-h", str(work), "-p", str(primary.port), "-D", str(node.data),
             "-X", "stream", "--checkpoint=fast", "--no-sync", "-T", f"{pts}={vts}", "-C", "-S", name],
            capture_output=True)
    node.conf(f"""
port = {node.port}
primary_conninfo = 'host={work} port={primary.port} application_name={name}'
primary_slot_name = '{name}'
shared_buffers = {args.shared_buffers}
greenreplica.mode = compact
greenreplica.rto = {args.rto}s
greenreplica.window_size = {args.window}
greenreplica.agent_socket = '{agent.socket}'
greenreplica.agent_volume = '{name}'
""")
    as_user(["touch", str(node.data / "standby.signal")])
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

        # 2. a batch during which member 1 fails and is replaced
        time.sleep(args.accumulate)
        b = status(node)["batches"]
        before = volume(agent, name)
        node.psql("SELECT greenreplica_batch_now()")
        at = wait_phase(node, args.fail_phase.split(","))
        if at is None:
            raise RuntimeError(f"{name}: the batch never reached phase {args.fail_phase}")
        v = volume(agent, name)
        r["volume_hints_at_failure"] = v["hints"]
        if name == "ido_nohint":
            agent.request({"op": "hint", "volume": name, "extents": []})
            r["volume_hints_after_clearing"] = volume(agent, name)["hints"]
        t0 = time.time()
        fail_and_replace(agent, name, 1)
        r["failed_in_phase"] = at["phase"]
        done = wait_batch_done(node, b)
        t_batch = time.time()
        r["batch_with_rebuild"] = done
        r["batch_ended_before_rebuild"] = member_health(agent, name, 1) != "in_sync"
        t_sync = wait_in_sync(agent, name, 1)
        after = volume(agent, name)
        r["rebuild_s"] = (t_sync - t0) if t_sync else None
        r["batch_end_after_failure_s"] = t_batch - t0
        r["surrogate_writes_during"] = surrogate_writes(after) - surrogate_writes(before)
        r["layout_metadata_bytes"] = after["layout_metadata_bytes"]
        log(f"  {name}: failed in {at['phase']}, batch {done['duration_s']:.2f} s, "
            f"rebuild {r['rebuild_s']} s, volume hints {r['volume_hints_at_failure']}")

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


def plot(out, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(out["configurations"])
    res = out["configurations"]
    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    ax[0].bar(names, [res[n].get("rebuild_s") or 0 for n in names], color="tab:blue")
    ax[0].set_title("rebuild of member 1 (s)")
    w = 0.38
    xs = range(len(names))
    ax[1].bar([x - w / 2 for x in xs], [res[n]["batch_in_sync"]["duration_s"] for n in names], w,
              label="in sync")
    ax[1].bar([x + w / 2 for x in xs], [res[n]["batch_with_rebuild"]["duration_s"] for n in names], w,
              label="member failed in the batch")
    ax[1].set_xticks(list(xs), names)
    ax[1].set_title("batch duration (s)")
    ax[1].legend(fontsize=8)
    ax[2].bar(names, [res[n].get("rto_measured_s") or 0 for n in names], color="tab:red")
    ax[2].axhline(out["setup"]["rto"], color="k", ls="--", label="greenreplica.rto")
    ax[2].set_title("promotion during a rebuild: RTO (s)")
    ax[2].legend(fontsize=8)
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
    p.add_argument("--shared-buffers", default="64MB")
    p.add_argument("--accumulate", type=int, default=20, help="seconds of load before each step")
    p.add_argument("--fail-phase", default="apply", help="batch phase(s) in which the member fails")
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
    print(f"\n{'config':<11} {'rebuild s':>9} {'batch in sync s':>15} {'batch w/ rebuild s':>18} "
          f"{'failed in':>9} {'hints':>5} {'RTO s':>6} {'TPC-C ok':>8}")
    for n, r in out["configurations"].items():
        print(f"{n:<11} {r['rebuild_s'] or float('nan'):>9.1f} {r['batch_in_sync']['duration_s']:>15.2f} "
              f"{r['batch_with_rebuild']['duration_s']:>18.2f} {r['failed_in_phase']:>9} "
              f"{r['volume_hints_at_failure']:>5} {r['rto_measured_s'] or float('nan'):>6.2f} "
              f"{str(r['tpcc_consistent_after_promotion']):>8}")
    print(f"run {out['run_s']:.0f} s, greenreplica.rto {out['setup']['rto']} s")


if __name__ == "__main__":
    main()
