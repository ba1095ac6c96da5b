#!/usr/bin/env python3
"""The sweep of `sundial bench` runs behind BENCHMARKS.md's aims, on both stores, printed as one
table.

Each round runs every workload below once per store and per build, the builds alternating
run by run so that a noisy shared machine weighs on each alike; every PostgreSQL run gets a
fresh database. What each row's aim is:

    steady 10,000/s, 60 s          lag p99 < 100 ms (start lag p99 shown beside it)
    burst 10,000                   lag p99 < 250 ms
    burst 100,000                  >= 40,000 triggers/s
    the three with --stored 1M     their median at most 10 % worse than the same workload's
                                   without (a lower lag or more triggers/s is within the aim)
    steady 1,000/s, 300 s          lag p99 < 20 ms, and RSS after the first minute at most
                                   10 % above its level at one minute, the most of the 30 s
                                   before it ("flat")
    burst 100,000 on 2 nodes       (PostgreSQL) triggers/s no lower than on one node

Usage:
    scripts/bench_sweep.py [--rounds N] [--stores sqlite,postgres] [--only NAME,...] BINARY...

    BINARY      release builds of sundial (`cargo build --release -p sundial`); with two or
                more, each row is given per build
    --rounds    how many times each run is repeated (default 3)
    --stores    which stores (default both)
    --only      the workloads to run, by the names in the table's first column
    --pg        the PostgreSQL server (default postgres://root@127.0.0.1:5432); the sweep
                creates and drops the database bench_sweep on it

The servers each bench starts inherit the environment, so a sweep of other settings is the
same command with them set, e.g. the settings docs/configuration.md gives for bursts:
    SUNDIAL_LOOKAHEAD=10s SUNDIAL_CLAIM_AHEAD=5s scripts/bench_sweep.py BINARY

Every run's closing JSON line also goes to stderr as it comes, prefixed with the round, the
build and the store, so a sweep cut short still leaves its figures.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKLOADS = [
    # name, bench arguments, what the row shows, the aim
    ("steady-10k", ["steady", "--rate", "10000", "--duration", "60s"], "p99", ("lt", 100.0)),
    ("burst-10k", ["burst", "--jobs", "10000"], "p99", ("lt", 250.0)),
    ("burst-100k", ["burst", "--jobs", "100000", "--lead-s", "20"], "tps", ("ge", 40000.0)),
    ("steady-10k-stored", ["steady", "--rate", "10000", "--duration", "60s", "--stored", "1000000"], "p99", ("near", "steady-10k")),
    ("burst-10k-stored", ["burst", "--jobs", "10000", "--stored", "1000000"], "p99", ("near", "burst-10k")),
    ("burst-100k-stored", ["burst", "--jobs", "100000", "--lead-s", "20", "--stored", "1000000"], "tps", ("near", "burst-100k")),
    ("steady-1k-300s", ["steady", "--rate", "1000", "--duration", "300s"], "p99", ("lt-flat", 20.0)),
    ("burst-100k-2-nodes", ["burst", "--jobs", "100000", "--lead-s", "20", "--nodes", "2"], "tps", ("not-below", "burst-100k")),
]


def run(binary, args, store, pg, workdir):
    """Runs one bench; returns its closing JSON object, or None when it failed."""
    cmd = [binary, "bench", *args]
    if store == "postgres":
        for sql in ("DROP DATABASE IF EXISTS bench_sweep WITH (FORCE)", "CREATE DATABASE bench_sweep"):
            subprocess.run(["psql", f"{pg}/postgres", "-qc", sql], check=True, capture_output=True)
        cmd += ["--database-url", f"{pg}/bench_sweep"]
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(f"FAILED {' '.join(cmd)}: {done.stderr.strip()[-500:]}\n")
        return None
    return json.loads(lines[-1])


def figure(report, shown):
    """The figure a row shows of one run: lag p99 (ms) or triggers/s."""
    if report is None:
        return None
    return report["lag_ms"]["p99"] if shown == "p99" else report["triggers_per_s"]


def flat(report):
    """Whether the nodes' RSS after the first minute stayed within 10 % of its level at it: the
    most of the 30 s before the one-minute mark (RSS swings by several MB within seconds, so a
    single reading may fall on a trough)."""
    rss = (report or {}).get("rss_mb") or {}
    at = rss.get("at_1min")
    if at is None:
        return False
    level = max(at, rss.get("peak_30s_to_1min", 0.0))
    return rss.get("peak_after_1min", 0.0) <= level * 1.10


def verdict(aim, shown, values, reports, medians, key):
    """Whether the runs of one row meet its aim."""
    if not values or any(v is None for v in values):
        return "failed run"
    if any(r["lost"] or r["duplicates"] for r in reports):
        return "NO (lost or duplicated)"
    kind, target = aim
    if kind == "lt":
        return "yes" if all(v < target for v in values) else "no"
    if kind == "ge":
        return "yes" if all(v >= target for v in values) else "no"
    if kind == "lt-flat":
        ok = all(v < target for v in values) and all(flat(r) for r in reports)
        return "yes" if ok else "no"
    base = medians.get((target, *key))
    if base is None:
        return f"needs {target}"
    median = statistics.median(values)
    if kind == "near":
        # Stored jobs must not slow the workload: at most 10 % worse (a higher lag p99, or
        # fewer triggers/s); better is within the aim, and shown as such.
        if not base:
            return f"cannot tell ({target} is 0)"
        worse = (median - base) / base if shown == "p99" else (base - median) / base
        if worse <= 0:
            return f"yes ({-worse:.0%} better)"
        return f"{'yes' if worse <= 0.10 else 'no'} ({worse:.0%} worse)"
    # not-below: at least the one-node figure (triggers/s).
    return "yes" if median >= base else f"no ({median / base:.0%})"


def aim_text(aim, shown):
    kind, target = aim
    unit = "ms" if shown == "p99" else "/s"
    if kind == "near":
        return f"at most 10 % worse than {target}"
    if kind == "not-below":
        return f">= {target}"
    return {"lt": "<", "ge": ">=", "lt-flat": "<"}[kind] + f" {target:,.0f} {unit}" + (
        ", RSS flat" if kind == "lt-flat" else ""
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--only", default="")
    parser.add_argument("--pg", default=os.environ.get("PG", "postgres://root@127.0.0.1:5432"))
    opts = parser.parse_args()
    stores = [s for s in opts.stores.split(",") if s]
    for s in stores:
        if s not in ("sqlite", "postgres"):
            parser.error(f"--stores: {s!r} is neither sqlite nor postgres")
    only = {n for n in opts.only.split(",") if n}
    unknown = only - {w[0] for w in WORKLOADS}
    if unknown:
        parser.error(f"--only: no workload named {', '.join(sorted(unknown))}")
    workloads = [w for w in WORKLOADS if not only or w[0] in only]
    binaries = [os.path.abspath(b) for b in opts.binaries]
    for b in binaries:
        if not os.access(b, os.X_OK):
            parser.error(f"{b}: not an executable")

    results = {}  # (workload, store, binary) -> [report]
    with tempfile.TemporaryDirectory() as workdir:
        for rnd in range(1, opts.rounds + 1):
            for name, args, _, _ in workloads:
                for store in stores:
                    if "--nodes" in args and store == "sqlite":
                        continue  # one scheduler process on the embedded store
                    for binary in binaries:
                        report = run(binary, args, store, opts.pg, workdir)
                        results.setdefault((name, store, binary), []).append(report)
                        sys.stderr.write(f"{rnd} {os.path.basename(binary)} {store} {name} {json.dumps(report)}\n")

    medians = {}
    for (name, store, binary), reports in results.items():
        shown = next(w[2] for w in WORKLOADS if w[0] == name)
        values = [figure(r, shown) for r in reports]
        if values and all(v is not None for v in values):
            medians[(name, store, binary)] = statistics.median(values)

    print("| workload | store | build | lag p99 (ms) or triggers/s, each run | start lag p99 (ms) | aim | met |")
    print("|---|---|---|---|---|---|---|")
    for name, _, shown, aim in workloads:
        for store in stores:
            for binary in binaries:
                reports = results.get((name, store, binary))
                if reports is None:
                    continue
                values = [figure(r, shown) for r in reports]
                runs = ", ".join("failed" if v is None else f"{v:,.0f}" for v in values)
                starts = ", ".join(
                    f"{r['start_lag_ms']['p99']:,.0f}" if r else "-" for r in reports
                )
                met = verdict(aim, shown, values, [r for r in reports if r], medians, (store, binary))
                print(f"| {name} | {store} | {os.path.basename(binary)} | {runs} | {starts} | {aim_text(aim, shown)} | {met} |")


if __name__ == "__main__":
    main()
