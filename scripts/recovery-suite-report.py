#!/usr/bin/env python3
"""Summarise a run of PostgreSQL's recovery suite (scripts/check-recovery.sh).

Reads the per-test results (TSV: config, test, status, seconds, reason), prints
the pass counts per configuration and the tests whose outcome differs, writes
the whole result as JSON, and exits 1 when greenreplica breaks a test:
  - a test that passes stock fails with greenreplica preloaded and off, or
  - a test that passes with greenreplica off (stock when off was not run)
    fails with batching on and is not listed in the incompatibility file;
and when a greenreplica configuration ran without a reference to compare with.
"""

import argparse
import datetime
import json
import os
import sys

STATUSES = ("pass", "fail", "skipped", "not-runnable")
CONFIG_ORDER = ("stock", "off", "compact")


def read_results(path):
    results = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            config, test, status, seconds, reason = (line.split("\t", 4) + [""])[:5]
            if status not in STATUSES:
                raise SystemExit(f"{path}: unknown status {status!r} for {test}")
            results.setdefault(config, {})[test] = {
                "status": status,
                "seconds": float(seconds),
                "reason": reason,
            }
    return results


def read_durations(path):
    durations = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    config, seconds = line.split()
                    durations[config] = int(seconds)
    return durations


def read_incompatible(path):
    """Lines 'test-name  reason'; '#' starts a comment."""
    listed = {}
    if not os.path.exists(path):
        return listed
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                raise SystemExit(f"{path}:{number}: a test name needs a reason")
            listed[parts[0]] = parts[1]
    return listed


def read_temp_configs(directory):
    configs = {"stock": ""}
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            if name.endswith(".conf"):
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    configs[name[: -len(".conf")]] = f.read()
    return configs


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", required=True)
    ap.add_argument("--durations", required=True)
    ap.add_argument("--incompatible", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--server-version", required=True)
    ap.add_argument("--source-version", required=True)
    ap.add_argument("--timeout", type=int, required=True)
    ap.add_argument("--temp-configs", required=True)
    ap.add_argument("--logs", required=True)
    ap.add_argument("--note", default="", help="how the run was made, when it was unusual")
    args = ap.parse_args()

    results = read_results(args.results)
    durations = read_durations(args.durations)
    incompatible = read_incompatible(args.incompatible)
    configs = [c for c in CONFIG_ORDER if c in results]
    tests = sorted({t for c in configs for t in results[c]})

    counts = {
        c: {s: sum(1 for r in results[c].values() if r["status"] == s) for s in STATUSES}
        for c in configs
    }
    print(f"{'configuration':<14} {'pass':>5} {'fail':>5} {'skipped':>8} {'n/a':>5} {'minutes':>8}")
    for c in configs:
        n = counts[c]
        minutes = f"{durations[c] / 60:.1f}" if c in durations else "-"
        print(
            f"{c:<14} {n['pass']:>5} {n['fail']:>5} {n['skipped']:>8} "
            f"{n['not-runnable']:>5} {minutes:>8}"
        )
    print("(n/a: not runnable here; skipped: the test skipped itself; neither counts as a pass)")

    def status(c, t):
        return results[c].get(t, {}).get("status", "-")

    differing = [t for t in tests if len({status(c, t) for c in configs}) > 1]
    if differing:
        print("\ntests whose outcome differs:")
        print(f"{'test':<34} " + " ".join(f"{c:<8}" for c in configs))
        for t in differing:
            print(f"{t:<34} " + " ".join(f"{status(c, t):<8}" for c in configs))

    regressions = []
    if "stock" in results and "off" in results:
        for t in tests:
            if status("stock", t) == "pass" and status("off", t) == "fail":
                regressions.append(
                    {"test": t, "config": "off", "baseline": "stock",
                     "reason": results["off"][t]["reason"]}
                )
    baseline = "off" if "off" in results else ("stock" if "stock" in results else None)
    accepted = []
    if "compact" in results and baseline:
        for t in tests:
            if status(baseline, t) == "pass" and status("compact", t) == "fail":
                entry = {"test": t, "config": "compact", "baseline": baseline,
                         "reason": results["compact"][t]["reason"]}
                if t in incompatible:
                    entry["listed_reason"] = incompatible[t]
                    accepted.append(entry)
                else:
                    regressions.append(entry)
    listed_but_passing = [t for t in incompatible if status("compact", t) == "pass"]

    if accepted:
        print("\nfailing with batching on, listed as inherent incompatibilities:")
        for e in accepted:
            print(f"  {e['test']}: {e['listed_reason']}")
    if listed_but_passing:
        print("\nlisted as incompatible but passing with batching on (the list may be stale):")
        for t in listed_but_passing:
            print(f"  {t}")
    if regressions:
        print("\nFAIL: greenreplica breaks these tests:")
        for e in regressions:
            print(f"  {e['test']} ({e['config']}, passes {e['baseline']}): {e['reason']}")

    # A configuration with greenreplica means nothing without one to compare with.
    unmatched = []
    if "off" in results and "stock" not in results and "compact" not in results:
        unmatched.append("off (needs stock)")
    if "compact" in results and baseline is None:
        unmatched.append("compact (needs off or stock)")
    if unmatched:
        print("\nFAIL: nothing to compare with for " + ", ".join(unmatched)
              + "; run the reference configurations too")

    document = {
        "what": "PostgreSQL 15 src/test/recovery TAP suite against the installed server",
        "generated_by": "make check-recovery (scripts/check-recovery.sh)",
        "finished_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "server_version": args.server_version,
        "suite_source_version": args.source_version,
        "pg_test_timeout_default_s": args.timeout,
        "note": args.note or None,
        "machine": {"cpus": os.cpu_count(), "loadavg_at_end": list(os.getloadavg())},
        "temp_config": {c: v for c, v in read_temp_configs(args.temp_configs).items() if c in configs},
        "duration_s": {c: durations.get(c) for c in configs},
        "counts": counts,
        "tests": {t: {c: results[c][t] for c in configs if t in results[c]} for t in tests},
        "differing": differing,
        "incompatible_listed": incompatible,
        "accepted_failures": accepted,
        "regressions": regressions,
        "not_compared": unmatched,
        "logs_kept_in": args.logs if regressions else None,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2, sort_keys=False)
        f.write("\n")
    print(f"\nwrote {args.json}")
    return 1 if regressions or unmatched else 0


if __name__ == "__main__":
    sys.exit(main())
