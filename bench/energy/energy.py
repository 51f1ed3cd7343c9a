#!/usr/bin/python3
"""End-to-end energy benchmark: one primary, one standby per configuration.

All standbys follow the same primary and so replay the very same WAL stream of the same
TPC-C-like run; each standby's tablespace lives on its own agent volume of emulated-hdd
members (RAID10, the same drive profile everywhere), so the agent's energy ledger of each
volume is the data-volume energy of that configuration.  pg_wal and the rest of each data
directory stay on the plain disk (the log volume).  The primary's volume is always on.

Configurations:
  always_on           stock standby (greenreplica.mode = off), volume always spinning
  idle_timeout_600    stock standby, the agent spins members down after 600 s idle (hd-idle)
  idle_timeout_short  stock standby, a tuned short idle timeout
  stock_tuned         what a good DBA would run instead: the short idle timeout and PostgreSQL
                      15's recovery prefetcher at full strength (TUNED_STOCK below)
  defer               greenreplica batches, the scheduler tells the agent when to sleep
  compact             as defer, with compaction (fold, sort, prefetch)
  compact_os          as compact, PREFETCH through the OS page cache (prefetch_method =
                      os_cache, merge gap = the drive's break-even gap) and PostgreSQL's
                      recovery prefetcher off (its reads are wasted on a compacting standby)
  compact_rolo_e      as compact, on a RoLo-E volume (issue 15) of the same members: only the
                      on-duty pair is active, a batch's write-back is logged on it while the
                      other pairs sleep (the batch's hinted wake spins up only the pairs its reads
                      need).  Not in the default set: it needs --members 4 or more; compare it
                      with compact in the same run (--configs compact,compact_rolo_e --members 8)
  compact_qmd         as compact, on a QMD volume (issue 16): the same RAID10 members plus a flash
                      member (profile ssd, the last), policy cooperative (the scheduler decides
                      when the volume sleeps, as for compact); the standby's tablespace is marked
                      cold (greenreplica_set_volume_temperature: a pair sleeps whole only when
                      every byte it holds is marked), so a batch whose window only writes
                      (write-only wake) lands its write-back in flash while both disks of the
                      pair sleep.  Not in the default set: compare it with compact in the same
                      run (--configs compact,compact_qmd)

Run as root (the agent mounts filesystems); PostgreSQL runs as the test user.
Writes the results as JSON (latest.json and a dated copy) and PNG plots.
"""
import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = "/usr/lib/postgresql/15/bin"
USER = os.environ.get("GR_TEST_USER", "grtest")
TPCC = ROOT / "bench" / "tpcc" / "tpcc.sh"
STOCK = ("always_on", "idle_timeout_600", "idle_timeout_short", "stock_tuned")
# A stock standby tuned as a good DBA would tune it for replay speed: PostgreSQL 15's recovery
# prefetcher at full strength.  Every benchmark compares against it.
TUNED_STOCK = """recovery_prefetch = on
maintenance_io_concurrency = 256
wal_decode_buffer_size = 64MB
"""
ALL_CONFIGS = STOCK + ("defer", "compact", "compact_os")
# Configurations on another layout than RAID10: name -> (batching mode, agent template).
OTHER_LAYOUTS = {"compact_rolo_e": ("compact", "cooperative_rolo_e")}
# Configurations on a QMD volume: name -> batching mode.  The volume is configured in
# agent.toml (its flash member has another profile than the disks, which a template cannot
# say), with the name of the configuration.
QMD_CONFIGS = {"compact_qmd": "compact"}
KNOWN_CONFIGS = ALL_CONFIGS + tuple(OTHER_LAYOUTS) + tuple(QMD_CONFIGS)
# The flash member of a QMD volume (the QMD paper's X25-M figures).
FLASH_PROFILE = "ssd"


def log(msg):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, **kw)


def as_user(cmd, **kw):
    env = f"PATH={PG_BIN}:/usr/bin:/bin"
    return run(["runuser", "-u", USER, "--", "env", env, *cmd], **kw)


class Agent:
    """The storage agent, started for this run with a template per power policy."""

    def __init__(self, work, profile, members, idle_short, member_size):
        self.work = work / "agent"
        self.socket = self.work / "run" / "control.sock"
        self.bin = ROOT / "contrib-storage" / "target" / "release" / "greenreplica-storage"
        self.profile = profile
        self.members = members
        self.idle_short = idle_short
        self.member_size = member_size
        self.proc = None
        self.extra_config = ""  # more sections for agent.toml, e.g. [[volume]]s with a trace
        self.agent_options = ""  # more keys of its [agent] section, e.g. fuse_threads
        self.start_stop_budget = None  # every template's start_stop_budget_per_day (None: 48)

    def template(self, name, policy, layout="raid10"):
        return f"""
[[template]]
name = "{name}"
layout = "{layout}"
members = {self.members}
member_kind = "emulated-hdd"
member_size = "{self.member_size}"
profile = "{self.profile}"
policy = "{policy}"
""" + (f"start_stop_budget_per_day = {self.start_stop_budget}\n" if self.start_stop_budget else "")

    def start(self):
        if not self.bin.exists():
            run(["bash", str(ROOT / "scripts" / "storage.sh"), "build"])
        for sub in ("run", "state", "volumes"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.work, 0o755)
        os.chmod(self.work / "run", 0o755)
        run(["chown", f"{USER}:", str(self.work / "volumes")])
        group = run(["id", "-gn", USER], capture_output=True).stdout.strip()
        config = f"""
[agent]
socket = "{self.socket}"
group = "{group}"
state_dir = "{self.work / 'state'}"
runtime_dir = "{self.work / 'run'}"
volume_directories = ["{self.work / 'volumes'}"]
{self.agent_options}"""
        config += self.template("always_on", "always-on")
        config += self.template("idle_timeout_600", "idle-timeout:600")
        config += self.template("idle_timeout_short", f"idle-timeout:{self.idle_short}")
        config += self.template("cooperative", "cooperative:600")
        if self.members >= 4:
            config += self.template("cooperative_rolo_e", "cooperative:600", layout="rolo-e")
        config += self.extra_config
        (self.work / "agent.toml").write_text(config)
        self.log = open(self.work / "agent.log", "a")
        self.proc = subprocess.Popen([str(self.bin), "serve", "--config", str(self.work / "agent.toml")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(240):
            try:
                self.request({"op": "volumes"})
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.25)
        raise RuntimeError(f"the storage agent did not start; see {self.work / 'agent.log'}")

    def request(self, req):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(self.socket))
            s.sendall((json.dumps(req) + "\n").encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        reply = json.loads(buf)
        if not reply.get("ok"):
            raise RuntimeError(f"agent refused {req['op']}: {reply.get('error')}")
        return reply

    def create_volume(self, name, template):
        """A volume mounted in a directory owned by the test user (created as that user)."""
        directory = self.work / "volumes" / name
        as_user(["mkdir", "-p", str(directory)])
        req = json.dumps({"op": "create_volume", "name": name, "template": template,
                          "directory": str(directory)})
        as_user([str(self.bin), "--socket", str(self.socket), "request", req], capture_output=True)
        as_user(["mkdir", "-p", str(directory / "ts")])
        return directory / "ts"

    def volumes(self):
        return {v["name"]: v for v in self.request({"op": "status"})["volumes"]}

    def qmd_volume(self, name):
        """agent.toml sections for a QMD volume: the RAID10 members of the other volumes and
        a flash member (the last), under the cooperative policy, mounted for the test user."""
        mount = self.work / "volumes" / name
        (self.work / "members").mkdir(parents=True, exist_ok=True)
        mount.mkdir(parents=True, exist_ok=True)
        text = f"""
[[volume]]
name = "{name}"
layout = "qmd"
policy = "cooperative:600"
[volume.export]
mount_point = "{mount}"
owner = "{USER}"
mode = "0755"
"""
        profiles = [self.profile] * self.members + [FLASH_PROFILE]
        for i, profile in enumerate(profiles):
            text += f"""[[volume.member]]
kind = "emulated-hdd"
path = "{self.work / 'members' / f'{name}-{i}.img'}"
size = "{self.member_size}"
profile = "{profile}"
"""
        self.extra_config += text

    def qmd_tablespace(self, name):
        """The tablespace directory on a configured QMD volume (created as the test user)."""
        ts = self.work / "volumes" / name / "ts"
        as_user(["mkdir", "-p", str(ts)])
        return ts

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Node:
    """A PostgreSQL server run by the test user, on a unix socket in the work directory."""

    def __init__(self, work, name, port):
        self.work, self.name, self.port = work, name, port
        self.data = work / name

    def psql(self, sql, capture=True):
        return as_user(["psql", "-X", "-q", "-At", "-h", str(self.work), "-p", str(self.port),
                        "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       capture_output=capture).stdout.strip() if capture else None

    def conf(self, text):
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(text)

    def start(self):
        as_user(["pg_ctl", "-D", str(self.data), "-l", str(self.work / f"{self.name}.log"), "-w", "start"],
                capture_output=True)

    def stop(self, mode="fast"):
        subprocess.run(["runuser", "-u", USER, "--", f"{PG_BIN}/pg_ctl", "-D", str(self.data),
                        "-m", mode, "stop"], capture_output=True)

    def env(self):
        return {"PGHOST": str(self.work), "PGPORT": str(self.port), "PGDATABASE": "postgres"}

    def follow(self, primary, tablespace_map):
        """Make this node a streaming standby of primary: a base backup with the tablespace
        mapping "OLD=NEW", a replication slot named after the node, standby.signal."""
        as_user(["pg_basebackup", "-h", str(self.work), "-p", str(primary.port), "-D", str(self.data),
                 "-X", "stream", "--checkpoint=fast", "--no-sync", "-T", tablespace_map,
                 "-C", "-S", self.name], capture_output=True)
        self.conf(f"""
port = {self.port}
primary_conninfo = 'host={self.work} port={primary.port} application_name={self.name}'
primary_slot_name = '{self.name}'
""")
        as_user(["touch", str(self.data / "standby.signal")])

    def tpcc(self, *args, check=True):
        """Run bench/tpcc/tpcc.sh against this node; returns the completed process."""
        env = [f"{k}={v}" for k, v in self.env().items()]
        return subprocess.run(["runuser", "-u", USER, "--", "env", f"PATH={PG_BIN}:/usr/bin:/bin", *env,
                               "bash", str(TPCC), *map(str, args)],
                              check=check, text=True, capture_output=True)


def standby_conf(config, args, volume):
    # Every standby, stock or not, gets the same buffer pool.
    common = f"shared_buffers = {args.shared_buffers}\n"
    if config == "stock_tuned":
        return common + "greenreplica.mode = off\n" + TUNED_STOCK
    if config in STOCK:
        return common + "greenreplica.mode = off\n"
    extra = ""
    if config == "compact_os":
        extra = (f"greenreplica.prefetch_method = os_cache\n"
                 f"greenreplica.prefetch_merge_gap = {break_even_gap(args.profile)[0]}\n"
                 "recovery_prefetch = off\n")
    if args.max_apply_delay is not None:
        extra += f"greenreplica.max_apply_delay = {args.max_apply_delay}\n"
    if args.max_spin_cycles_per_day is not None:
        extra += f"greenreplica.max_spin_cycles_per_day = {args.max_spin_cycles_per_day}\n"
    mode = OTHER_LAYOUTS.get(config, (QMD_CONFIGS.get(config, config.removesuffix("_os")),))[0]
    if args.debug_log:
        extra += "log_min_messages = debug1\n"
    return common + extra + f"""greenreplica.mode = {mode}
greenreplica.rto = {args.rto}s
greenreplica.window_size = {args.window}
greenreplica.agent_socket = '{volume.socket}'
greenreplica.agent_volume = '{config}'
"""


def break_even_gap(profile):
    """The break-even gap of the profile's drive in 8 KiB blocks: reading through g blocks
    costs g block transfers at the media rate, repositioning costs the average seek plus half
    a rotation (the same formula as gr_break_even_gap() in src/gr_fold.c).  Returns the gap,
    the reposition time (ms) and the media rate (MB/s)."""
    import tomllib
    spec = tomllib.loads((ROOT / "contrib-storage" / "profiles" / f"{profile}.toml").read_text())
    reposition_ms = spec["avg_seek_ms"] + 0.5 * 60000.0 / spec["rpm"]
    # media rate of the outer zone when zones are given, else the interface rate
    zones = spec.get("geometry", {}).get("zones") or []
    if zones and "sectors_per_track" in zones[0]:
        media_mb_s = (zones[0]["sectors_per_track"] * spec["geometry"].get("sector_bytes", 512)
                      * spec["rpm"] / 60 / 1e6)
    else:
        media_mb_s = spec.get("media_mb_s", spec["transfer_mb_s"])
    block_ms = 8192 / (media_mb_s * 1e6) * 1000
    return int(reposition_ms / block_ms), reposition_ms, media_mb_s


def promote_at_worst_phase(node, primary, args, samples):
    """Keep the TPC-C load going until the standby sleeps with its largest backlog — 95 % of
    the window unapplied, or its RTO estimate at 95 % of the largest it reached asleep during
    the workload (a batch starts at either: the volume is asleep and the next batch is about
    to start) — then promote it and time the first write."""
    worst = max((s.get("rto_estimate_s", 0) for s in samples if s.get("phase") == "sleep"), default=0)
    threshold = 0.95 * worst
    window = int(node.psql(f"SELECT pg_size_bytes('{args.window}')"))
    load = subprocess.Popen(["runuser", "-u", USER, "--", "env", f"PATH={PG_BIN}:/usr/bin:/bin",
                             *[f"{k}={v}" for k, v in primary.env().items()],
                             "bash", str(TPCC), "run", str(args.worst_phase_wait), str(args.clients),
                             "-R", str(args.rate)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + args.worst_phase_wait
    at = last = None
    try:
        while time.time() < deadline and load.poll() is None:
            try:
                phase, unapplied, est = node.psql(
                    "SELECT phase, coalesce(unapplied_bytes, 0), coalesce(rto_estimate_s, 0) "
                    "FROM greenreplica_status").split("|")
            except subprocess.CalledProcessError:
                time.sleep(0.5)
                continue
            last = {"phase": phase, "unapplied_bytes": int(unapplied), "rto_estimate_s": float(est),
                    "largest_estimate_asleep_s": worst}
            if phase == "sleep" and (int(unapplied) >= 0.95 * window or (worst > 0 and float(est) >= threshold)):
                at = dict(last, reached=True)
                break
            time.sleep(0.5)
    finally:
        load.terminate()
        load.wait()
    if at is None:
        log(f"  worst phase not reached within {args.worst_phase_wait} s: promoting anyway")
        at = dict(last or {}, reached=False)
    at["rto_measured_s"] = promote_and_time(node)
    log(f"  promoted at the worst phase {at}")
    return at


# The note comes last: it is free text (split off with maxsplit).
STATUS_SQL = ("SELECT phase, coalesce(unapplied_bytes, 0), coalesce(rto_estimate_s, 0), "
              "coalesce(r_gen, 0), coalesce(r_apl, 0), coalesce(batches, 0), "
              "coalesce(r_apl_measured, false), coalesce(paced, false), "
              "coalesce(spin_cycles_today, 0), coalesce(write_only_batches, 0), "
              "coalesce(note, '') FROM greenreplica_status")


def sample(agent, standbys, samples, stop):
    """Once a second: every member's power state and every standby's scheduler figures."""
    t0 = time.time()
    last = -1.0
    while not stop.is_set():
        t = time.time() - t0
        try:
            vols = agent.volumes()
        except Exception as e:  # a slow answer costs a sample, not the run
            log(f"sample: agent: {e}")
            vols = {}
        for config, node in standbys.items():
            row = {"t": round(t, 2)}
            v = vols.get(config)
            if v:
                row["members"] = [m["state"] for m in v["members"]]
                # why each member spins (hint, io, request, ...) and its I/O so far: a wake
                # that read the disks shows against the batch that caused it
                row["awake"] = [m.get("awake") for m in v["members"]]
                row["reads"] = [m["ledger"].get("reads") for m in v["members"]]
                row["writes"] = [m["ledger"].get("writes") for m in v["members"]]
            try:
                (phase, unapplied, est, rgen, rapl, batches, measured, paced, cycles,
                 write_only, note) = node.psql(STATUS_SQL).split("|", 10)
                # write_only_batches per sample tells which batches were woken write-only
                # (a batch whose wake spun the disks up anyway shows against it).
                row.update(phase=phase, unapplied_bytes=int(unapplied), rto_estimate_s=float(est),
                           r_gen=float(rgen), r_apl=float(rapl), batches=int(batches),
                           r_apl_measured=measured == "t", paced=paced == "t",
                           spin_cycles_today=int(cycles), write_only_batches=int(write_only),
                           note=note)
            except Exception:
                pass
            samples[config].append(row)
        if int(t) // 15 != int(last) // 15:
            parts = []
            for config in standbys:
                row = samples[config][-1] if samples[config] else {}
                states = "/".join(s[:4] for s in row.get("members", []))
                if config in STOCK:
                    parts.append(f"{config} {states}")
                else:
                    parts.append(f"{config} {row.get('phase', '?')} {row.get('unapplied_bytes', 0) // 1024} kB "
                                 f"b{row.get('batches', 0)} {states}")
            log("  " + " | ".join(parts))
        last = t
        stop.wait(1.0)


def ledger(volume):
    members = [m["ledger"] for m in volume["members"]]
    return {"energy_joules": volume["ledger"]["energy_joules"], "members": members}


def delta(after, before):
    out = {"energy_joules": after["energy_joules"] - before["energy_joules"], "members": []}
    for a, b in zip(after["members"], before["members"]):
        out["members"].append({
            "energy_joules": a["energy_joules"] - b["energy_joules"],
            "spin_downs": a["spin_downs"] - b["spin_downs"],
            "spin_ups": a["spin_ups"] - b["spin_ups"],
            **{k: a.get(k, 0) - b.get(k, 0) for k in ("reads", "writes", "bytes_read", "bytes_written")},
            "state_seconds": {k: a["state_seconds"][k] - b["state_seconds"].get(k, 0)
                              for k in a["state_seconds"]},
        })
    return out


def promote_and_time(node):
    start = time.time()
    as_user(["pg_ctl", "-D", str(node.data), "-w", "promote"], capture_output=True)
    while time.time() - start < 600:
        r = subprocess.run(["runuser", "-u", USER, "--", f"{PG_BIN}/psql", "-X", "-q", "-h", str(node.work),
                            "-p", str(node.port), "-d", "postgres", "-c",
                            "CREATE TABLE IF NOT EXISTS failover_probe (at timestamptz); "
                            "INSERT INTO failover_probe VALUES (now())"], capture_output=True)
        if r.returncode == 0:
            return time.time() - start
        time.sleep(0.01)
    return None


def mark_qmd_cold(agent, node, config):
    """Mark a QMD standby's volume cold, as a DBA would for a DR standby, and record what the
    agent made of each step.

    A QMD pair sleeps whole (and takes a write-only batch in flash alone) only when every
    byte it holds is marked, some of it cold (storage-agent.md, "Partial on-line
    mirrors"). The tablespace's files alone leave ext4's own metadata, the free space and
    the files' later growth unmarked, so no pair is cold: that step is kept, first, to
    record in the run that it does not suffice (its `cold_groups`). The whole volume cold
    (greenreplica_set_volume_temperature) then covers [0, capacity). The usual sequence
    would mark hot tablespaces hot after it; this standby has none (pg_default and pg_wal
    live on the log volume)."""
    steps = {}
    marked = node.psql("SELECT extents, files, skipped_files FROM "
                       "greenreplica_set_tablespace_temperature('data', 'cold')")
    steps["tablespace_cold"] = {"extents|files|skipped": marked,
                                "temperatures": agent.volumes()[config]["temperatures"]}
    log(f"standby {config}: tablespace marked cold (extents|files|skipped {marked}); "
        f"agent: {steps['tablespace_cold']['temperatures']}")
    marked = node.psql("SELECT marked_bytes, ranges FROM greenreplica_set_volume_temperature('cold')")
    vol = agent.volumes()[config]
    steps["volume_cold"] = {"marked_bytes|ranges": marked, "capacity_bytes": vol["capacity_bytes"],
                            "temperatures": vol["temperatures"]}
    log(f"standby {config}: volume marked cold (marked_bytes|ranges {marked}); "
        f"agent: {steps['volume_cold']['temperatures']}")
    if not vol["temperatures"]["cold_groups"]:
        log(f"standby {config}: WARNING: no pair is cold after the volume mark; "
            "write-only batches will wake the disks")
    return steps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="deskstar-t7k250")
    p.add_argument("--members", type=int, default=2, help="members per RAID10 volume (even)")
    p.add_argument("--member-size", default="1GiB", help="size of each emulated drive's backing file")
    p.add_argument("--warehouses", type=int, default=1)
    p.add_argument("--duration", type=int, default=240, help="seconds of workload")
    p.add_argument("--rate", type=int, default=100, help="TPC-C transactions per second")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rto", type=int, default=30, help="greenreplica.rto of defer/compact, s")
    p.add_argument("--window", default="16MB", help="greenreplica.window_size")
    p.add_argument("--idle-short", type=int, default=10, help="the tuned idle timeout, s")
    p.add_argument("--checkpoint-timeout", default="2min",
                   help="the primary's checkpoint_timeout: stock standbys write back at each restartpoint")
    p.add_argument("--shared-buffers", default="128MB",
                   help="every standby's shared_buffers; a window's distinct blocks should fit")
    p.add_argument("--configs", default=",".join(ALL_CONFIGS))
    p.add_argument("--max-apply-delay", default=None,
                   help="greenreplica.max_apply_delay of defer/compact (its default, 300 s, starts a "
                        "batch every 5 minutes whatever the RTO allows; 0: the RTO alone decides)")
    p.add_argument("--max-spin-cycles-per-day", type=int, default=None,
                   help="greenreplica.max_spin_cycles_per_day of defer/compact (its default, 24: "
                        "once 12 cycles are spent, within minutes in a short run, the pace holds "
                        "batches back until the RTO bound starts one; compare standbys in a short "
                        "run with a budget the run cannot spend by half, e.g. its largest, 1440; "
                        "the agent's templates get the same start/stop budget)")
    p.add_argument("--worst-phase-failover", default=None, metavar="CONFIG",
                   help="after the workload, keep the load going until this batching standby sleeps "
                        "with its largest backlog, and promote it then (the others at the end)")
    p.add_argument("--worst-phase-wait", type=int, default=900,
                   help="longest wait for the worst phase, s")
    p.add_argument("--debug-log", action="store_true",
                   help="batching standbys log at DEBUG1 (why a wake was plain, not write-only); "
                        "with KEEP=1 in the environment the logs stay in the work directory")
    p.add_argument("--results", default=str(ROOT / "bench" / "results"))
    p.add_argument("--name", default="latest", help="results file stem")
    args = p.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in KNOWN_CONFIGS:
            sys.exit(f"energy: unknown configuration {c!r} (known: {', '.join(KNOWN_CONFIGS)})")
        if c in OTHER_LAYOUTS and (args.members < 4 or args.members % 2):
            sys.exit(f"energy: {c} needs an even --members of at least 4 (two pairs), not {args.members}")
    if os.geteuid() != 0:
        sys.exit("energy: run as root (the storage agent mounts filesystems)")

    work = Path(tempfile.mkdtemp(prefix="greenreplica-energy."))
    os.chmod(work, 0o755)
    run(["chown", f"{USER}:", str(work)])
    agent = Agent(work, args.profile, args.members, args.idle_short, args.member_size)
    if args.max_spin_cycles_per_day is not None:
        # the agent's own budget (48 a day) must not refuse what the scheduler's allows
        agent.start_stop_budget = max(48, args.max_spin_cycles_per_day)
    for config in configs:
        if config in QMD_CONFIGS:
            agent.qmd_volume(config)
    nodes = []
    # A SIGTERM (a killed run) still stops the clusters and the agent and removes the volumes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        log(f"storage agent: {args.members}-member RAID10 volumes of {args.profile}")
        agent.start()

        log(f"primary: TPC-C with {args.warehouses} warehouse(s) on an always-on volume")
        primary = Node(work, "primary", 56100)
        nodes.append(primary)
        as_user(["initdb", "-D", str(primary.data), "-A", "trust", "--no-sync"], capture_output=True)
        primary.conf(f"""
port = {primary.port}
listen_addresses = ''
unix_socket_directories = '{work}'
shared_preload_libraries = 'greenreplica'
wal_level = replica
max_wal_senders = 20
max_wal_size = 2GB
checkpoint_timeout = {args.checkpoint_timeout}
""")
        primary.start()
        ts = agent.create_volume("primary", "always_on")
        primary.psql("CREATE EXTENSION greenreplica")
        primary.psql(f"CREATE TABLESPACE data LOCATION '{ts}'")
        primary.tpcc("init", args.warehouses, "data")

        standbys = {}
        marking = {}
        for i, config in enumerate(configs):
            template = {"defer": "cooperative", "compact": "cooperative", "compact_os": "cooperative",
                        "stock_tuned": "idle_timeout_short",
                        **{c: t for c, (_, t) in OTHER_LAYOUTS.items()}}.get(config, config)
            vts = agent.qmd_tablespace(config) if config in QMD_CONFIGS else agent.create_volume(config, template)
            node = Node(work, config, 56101 + i)
            # A slot per standby: the next standby's base backup checkpoints the primary,
            # which could otherwise remove WAL a standby that is still starting needs.
            as_user(["pg_basebackup", "-h", str(work), "-p", str(primary.port), "-D", str(node.data),
                     "-X", "stream", "--checkpoint=fast", "--no-sync", "-T", f"{ts}={vts}",
                     "-C", "-S", config],
                    capture_output=True)
            node.conf(f"""
port = {node.port}
primary_conninfo = 'host={work} port={primary.port} application_name={config}'
primary_slot_name = '{config}'
{standby_conf(config, args, agent)}""")
            as_user(["touch", str(node.data / "standby.signal")])
            node.start()
            nodes.append(node)
            standbys[config] = node
            if config in QMD_CONFIGS:
                marking[config] = mark_qmd_cold(agent, node, config)
            log(f"standby {config}: started")

        lsn = primary.psql("SELECT pg_current_wal_lsn()")
        for config, node in standbys.items():
            deadline = time.time() + 300
            while node.psql(f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'") != "t":
                if time.time() > deadline:
                    raise RuntimeError(f"standby {config} did not receive the primary's WAL up to {lsn} "
                                       f"within 300 s; see {node.work / (config + '.log')}")
                time.sleep(0.2)

        before = {c: ledger(v) for c, v in agent.volumes().items() if c in standbys}
        samples = {c: [] for c in standbys}
        stop = threading.Event()
        sampler = threading.Thread(target=sample, args=(agent, standbys, samples, stop), daemon=True)
        sampler.start()
        log(f"workload: {args.duration} s of the TPC-C mix at {args.rate} tps, {args.clients} clients")
        t_start = time.time()
        load = subprocess.Popen(["runuser", "-u", USER, "--", "env", f"PATH={PG_BIN}:/usr/bin:/bin",
                                 *[f"{k}={v}" for k, v in primary.env().items()],
                                 "bash", str(TPCC), "run", str(args.duration), str(args.clients),
                                 "-R", str(args.rate), "-P", "30"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in load.stdout:
            if line.startswith("progress:") or "tps =" in line:
                log("  " + line.strip())
        load.wait()
        elapsed = time.time() - t_start
        stop.set()
        sampler.join()
        after = {c: ledger(v) for c, v in agent.volumes().items() if c in standbys}
        vols = agent.volumes()
        write_only = {}
        for config, node in standbys.items():
            if config not in STOCK:
                try:
                    write_only[config] = int(node.psql("SELECT write_only_batches FROM greenreplica_status"))
                except (subprocess.CalledProcessError, ValueError):
                    write_only[config] = None
        primary_check = primary.tpcc("check", check=False).returncode == 0

        worst = None
        if args.worst_phase_failover in standbys:
            log(f"failover at the worst phase: {args.worst_phase_failover}")
            worst = promote_at_worst_phase(standbys[args.worst_phase_failover], primary, args,
                                           samples[args.worst_phase_failover])
        log("failover: promoting every standby, timing its first committed write")
        results = {}
        for config, node in standbys.items():
            status = samples[config][-1] if samples[config] else {}
            if worst is not None and config == args.worst_phase_failover:
                rto_measured = worst["rto_measured_s"]
            else:
                rto_measured = promote_and_time(node)
            check = node.tpcc("check", check=False).returncode == 0
            d = delta(after[config], before[config])
            profile = vols[config]["profile"]
            results[config] = {
                "layout": vols[config]["layout"],
                "energy_joules": d["energy_joules"],
                "members": d["members"],
                # Per mirrored pair (members 2p, 2p+1): energy and spin-ups.
                "pairs": [{"members": [2 * p, 2 * p + 1],
                           "energy_joules": sum(m["energy_joules"] for m in d["members"][2 * p:2 * p + 2]),
                           "spin_ups": sum(m["spin_ups"] for m in d["members"][2 * p:2 * p + 2]),
                           "writes": sum(m["writes"] for m in d["members"][2 * p:2 * p + 2]),
                           "reads": sum(m["reads"] for m in d["members"][2 * p:2 * p + 2])}
                          for p in range(len(d["members"]) // 2)],
                "avg_power_per_member_w": d["energy_joules"] / elapsed / len(d["members"]),
                "spin_cycles": d["members"][0]["spin_downs"],
                # A start/stop cycle completes with its spin-up; counting spin-downs would
                # also count the spin-down on entering batching, which has no counterpart
                # in a day of steady state.
                "spin_cycles_per_day": d["members"][0]["spin_ups"] * 86400.0 / elapsed,
                "r_gen": status.get("r_gen"),
                "r_apl": status.get("r_apl") if config not in STOCK else None,
                "r_apl_measured": status.get("r_apl_measured") if config not in STOCK else None,
                "largest_unapplied_bytes": max((s.get("unapplied_bytes", 0) for s in samples[config]), default=0),
                "largest_rto_estimate_s": (max((s.get("rto_estimate_s", 0) for s in samples[config]), default=0)
                                           if config not in STOCK else None),
                "batches": status.get("batches") if config not in STOCK else None,
                # Once half of greenreplica.max_spin_cycles_per_day is spent the pace holds
                # batches back until the RTO bound (or the pace) starts one: a run of minutes
                # spends a day's budget, so say when that happened.
                "paced_from_s": (next((s["t"] for s in samples[config] if s.get("paced")), None)
                                 if config not in STOCK else None),
                "spin_cycles_today": status.get("spin_cycles_today") if config not in STOCK else None,
                "write_only_batches": write_only.get(config),
                # QMD's flash member (the last): its share of the energy.
                "flash": ({"energy_joules": d["members"][-1]["energy_joules"],
                           "writes": d["members"][-1]["writes"], "reads": d["members"][-1]["reads"]}
                          if config in QMD_CONFIGS else None),
                # What the agent made of the cold marks (QMD): cold_groups lists the pairs
                # that may sleep whole, right after each mark and at the end of the run.
                "marking": marking.get(config),
                "temperatures_at_end": vols[config].get("temperatures") if config in QMD_CONFIGS else None,
                # Start/stops of every disk (not the flash) per day.
                "disk_spin_ups_per_day": [m["spin_ups"] * 86400.0 / elapsed for m in
                                          (d["members"][:-1] if config in QMD_CONFIGS else d["members"])],
                "rto_configured_s": args.rto if config not in STOCK else None,
                "rto_measured_s": rto_measured,
                "promoted_at_worst_phase": worst if config == args.worst_phase_failover else None,
                "tpcc_consistent_after_failover": check,
                "profile": {k: profile[k] for k in ("name", "active_w", "idle_w", "standby_w",
                                                    "spin_up_s", "break_even_s")},
            }
            r = results[config]
            r["r_apl_over_r_gen"] = (r["r_apl"] / r["r_gen"]) if r["r_apl"] and r["r_gen"] else None
            log(f"  {config}: promote to first write {rto_measured:.2f} s, TPC-C consistent: {check}")

        # The physical limit: every member in standby except the least active time any
        # configuration needed for the same I/O, with no transition costs.
        first = next(iter(results.values()))
        prof = first["profile"]
        limit = 0.0
        for m in range(min(len(r["members"]) for r in results.values())):
            active = min(r["members"][m]["state_seconds"].get("active", 0) for r in results.values())
            limit += prof["active_w"] * active + prof["standby_w"] * (elapsed - active)
        base = results.get("always_on", {}).get("energy_joules")
        limit_saving = (1 - limit / base) if base else None
        for r in results.values():
            r["saving_vs_always_on"] = (1 - r["energy_joules"] / base) if base else None
            r["saving_share_of_limit"] = (r["saving_vs_always_on"] / limit_saving) if limit_saving else None

        out = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
            "setup": {k: v for k, v in vars(args).items() if k not in ("results", "name")},
            "duration_s": elapsed,
            "physical_limit_joules": limit,
            "physical_limit_saving": limit_saving,
            "tpcc_consistent_on_primary": primary_check,
            "configurations": results,
            "samples": samples,
        }
        res = Path(args.results)
        res.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
        # The dated copy keeps a history of "latest" runs; named runs are their own record.
        paths = [res / f"{args.name}.json"]
        if args.name == "latest":
            paths.append(res / f"energy-{stamp}.json")
        for path in paths:
            path.write_text(json.dumps(out, indent=2))
        log(f"results: {res / (args.name + '.json')}")
        subprocess.run(["/usr/bin/python3", str(Path(__file__).with_name("plot.py")),
                        str(res / f"{args.name}.json")], check=False)
        print_table(out)
    finally:
        for node in reversed(nodes):
            node.stop("immediate")
        agent.stop()
        subprocess.run(["bash", str(ROOT / "scripts" / "test-agent.sh"), "stop", str(agent.work)],
                       capture_output=True)
        if os.environ.get("KEEP"):  # the logs of the agent and of every node, for a look
            log(f"kept {work} (KEEP is set)")
        else:
            subprocess.run(["rm", "-rf", str(work)])


def print_table(out):
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print()
    print(f"{'configuration':<20} {'energy J':>10} {'saving':>8} {'of limit':>9} {'W/member':>9} "
          f"{'cycles/day':>11} {'Rapl/Rgen':>10} {'max est s':>10} {'RTO s':>6} {'measured s':>11}")
    for name, r in out["configurations"].items():
        print(f"{name:<20} {r['energy_joules']:>10.0f} {f(r['saving_vs_always_on'], '>8.1%')} "
              f"{f(r['saving_share_of_limit'], '>9.1%')} {r['avg_power_per_member_w']:>9.2f} "
              f"{r['spin_cycles_per_day']:>11.0f} {f(r['r_apl_over_r_gen'], '>10.1f')} "
              f"{f(r['largest_rto_estimate_s'], '>10.1f')} {f(r['rto_configured_s'], '>6')} "
              f"{f(r['rto_measured_s'], '>11.2f')}")
    print(f"physical limit: {out['physical_limit_joules']:.0f} J "
          f"(saving {f(out['physical_limit_saving'], '.1%')}); run {out['duration_s']:.0f} s; "
          f"TPC-C consistent on the primary: {out['tpcc_consistent_on_primary']}")
    for name, r in out["configurations"].items():
        if r.get("write_only_batches") is not None:
            disks = ", ".join(f"{c:.0f}" for c in r.get("disk_spin_ups_per_day", []))
            flash = (f"; flash {r['flash']['energy_joules']:.0f} J, {r['flash']['writes']} writes"
                     if r.get("flash") else "")
            print(f"{name}: {r['write_only_batches']} of {r['batches']} batches write-only; "
                  f"start/stops per day per disk: {disks}{flash}")
        if len(r.get("pairs", [])) > 1:
            print(f"{name} ({r.get('layout')}) per pair: " + "; ".join(
                f"pair {i}: {p['energy_joules']:.0f} J, {p['spin_ups']} spin-ups, {p['writes']} writes, "
                f"{p['reads']} reads" for i, p in enumerate(r["pairs"])))


if __name__ == "__main__":
    main()
