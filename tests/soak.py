"""``make soak``: the crash and load harness for a configurable duration.

    python -m tests.soak --seconds 600

Runs rounds of concurrent load with a SIGKILL at a random point and a restart,
checking after each restart that nothing acknowledged was lost and nothing
half-applied (tests/crash_harness.py), then prints one summary line. Exit code
1 when anything was lost or an invariant broke.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from numamem.testing.daemon import short_tmpdir
from tests.crash_harness import Harness


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--pod-level",
        action="store_true",
        help="the pod-level feature gates in the pod scope, half the pods by pod-level resources",
    )
    args = parser.parse_args()
    root = short_tmpdir()
    harness = Harness(root, args.seed, pod_level=args.pod_level)
    deadline = time.monotonic() + args.seconds
    started = time.monotonic()
    try:
        while time.monotonic() < deadline:
            harness.round(0.3, 3.0)
            if harness.report.restarts % 10 == 0:
                print(
                    f"[{time.monotonic() - started:6.0f}s] {harness.report.summary()}", flush=True
                )
        report = harness.finish()
    finally:
        harness.daemon.kill()
        shutil.rmtree(root, ignore_errors=True)
    mode = " pod-level" if args.pod_level else ""
    print(f"soak{mode} seed={args.seed} seconds={args.seconds:.0f} {report.summary()}")
    for line in (report.lost + report.violations)[:20]:
        print(f"  {line}")
    return 1 if report.lost or report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
