"""numamem benchmarks (``make bench``): every figure beside a floor measured in the same run.

The floor is ``grpc.health.v1.Health/Check`` over the daemon's unix socket: the
cost of one gRPC round trip on this machine. Everything else is reported as
p50/p99 and as a ratio to the floor's p50, so runs on different machines
compare. The daemon is the real one (``python -m numamem serve``) on a fake
sysfs machine in a temporary directory, with durable checkpoints (fsync) on
that directory's file system.

Prints one table and writes every figure to ``bench/results/bench-<time>.json``.
``--quick`` shortens every phase (for a smoke run, not for numbers).

This module runs the phases (:mod:`bench.memory`, :mod:`bench.targets`,
:mod:`bench.large_numa`, :mod:`bench.hard_paths`, :mod:`bench.metacache`,
:mod:`bench.startup`, :mod:`bench.cli_start`, :mod:`bench.nri`) and writes the report;
what they share is :mod:`bench.harness`. Nothing imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import cli_start, hard_paths, large_numa, nri, readme, targets
from bench.harness import Report, Scale, daemon, floor_phase
from bench.memory import hint_phase, memory_manager_phase, numa_grpc_phase, podresources_phase
from bench.metacache import metacache_growth_phase, metacache_phase, metrics_phase
from bench.startup import startup_phase

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short phases: a smoke run, not numbers"
    )
    parser.add_argument(
        "--only", action="append", default=[], help="run only these phases (repeatable)"
    )
    parser.add_argument(
        "--readme",
        action="store_true",
        help="make this run the documented performance table (bench/readme.py)",
    )
    parser.add_argument(
        "--baseline",
        default=large_numa.BASELINE,
        help="revision the numa phase compares with ('' for none)",
    )
    args = parser.parse_args()
    s = (
        Scale(
            latency_n=200,
            warmup=20,
            seconds=0.5,
            hints_n=20,
            large_pods=200,
            large_containers=1000,
            journal_records=2000,
            numa_reps=20,
            hard_reps=3,
            target_iterations=200,
            compactions=1,
            cli_runs=5,
            nri_pods=5,
        )
        if args.quick
        else Scale()
    )
    phases = [
        "memory", "targets", "hints", "numa", "hard", "metacache", "podresources", "startup",
        "metrics", "cli", "nri",
    ]  # fmt: skip
    chosen = args.only or phases
    root = Path(tempfile.mkdtemp(prefix="nmbench-", dir="/tmp"))
    report = Report()
    report.figures["machine"] = {
        "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
        "quick": args.quick, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    began = time.perf_counter()
    try:
        with daemon(root / "main") as d:
            floor_phase(report, d, s)
            if "memory" in chosen:
                memory_manager_phase(report, d, s)
        if "targets" in chosen:
            targets.phase(report, root, s.target_iterations, s.compactions)
        if "hints" in chosen:
            hint_phase(report, root, s)
        if "numa" in chosen:
            large_numa.phase(report, root, s.numa_reps, args.baseline)
            numa_grpc_phase(report, root, s)
        if "hard" in chosen:
            hard_paths.phase(report, root, s.hard_reps)
        if "metacache" in chosen:
            metacache_phase(report, root, s)
            metacache_growth_phase(report, root, s)
        if "podresources" in chosen:
            podresources_phase(report, root, s)
        if "startup" in chosen:
            startup_phase(report, root, s)
        if "metrics" in chosen:
            metrics_phase(report, root, s)
        if "cli" in chosen:
            cli_start.phase(report, root, s.cli_runs)
        if "nri" in chosen:
            nri.phase(report, root, s.nri_pods)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.figures["bench_seconds"] = time.perf_counter() - began
    print()
    width = max(len(row[0]) for row in report.rows)
    print(f"{'figure'.ljust(width)}  {'p50 / value':>16}  {'p99':>12}  vs floor / note")
    for label, a, b, c in report.rows:
        print(f"{label.ljust(width)}  {a:>16}  {b:>12}  {c}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report.figures["rows"] = [list(row) for row in report.rows]
    out.write_text(json.dumps(report.figures, indent=2, sort_keys=True) + "\n")
    print(
        f"\n{len(report.figures)} figures written to {out.relative_to(REPO)} in {report.figures['bench_seconds']:.0f} s"
    )
    if args.readme:
        if args.only or args.quick:
            print(
                "--readme needs a full run (no --only, no --quick): the documented table unchanged"
            )
            return 1
        readme.publish(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
