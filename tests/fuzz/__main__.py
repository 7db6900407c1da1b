"""``python -m tests.fuzz``: a fuzz campaign against the real daemon; exit code 1 on a finding.

    python -m tests.fuzz --requests 100000               # a new seed, printed
    python -m tests.fuzz --seed 7 --requests 1234        # replay a run up to request 1233
    python -m tests.fuzz --seed 7 --index 1233           # that one request on a fresh daemon
    python -m tests.fuzz --machine large --requests 2000 # 40 nodes: long hint searches

A replay needs the campaign's --check-every and --restart-every too (they decide
when the daemon restarts and what it holds then): each finding's replay line
gives every parameter. Prints the parameters first, then the histogram of status
codes (per RPC and overall), the maximum RSS, the worst cost of a request beside its
bound (tests/fuzz/cost.py), and every finding with the command that replays it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from numamem.testing.daemon import short_tmpdir
from tests.fuzz.machines import MACHINES
from tests.fuzz.run import Campaign


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--index", type=int, default=None, help="send only this request")
    parser.add_argument("--check-every", type=int, default=500)
    parser.add_argument(
        "--restart-every", type=int, default=25000, help="0: restart only at the end"
    )
    parser.add_argument(
        "--machine",
        choices=MACHINES,
        default="small",
        help="small: 2 nodes; large: 40 nodes, prefer-closest (long hint searches)",
    )
    return parser


def build_campaign(args: argparse.Namespace, root: Path) -> tuple[Campaign, int]:
    """The campaign ``args`` describe (a new seed when none is given), and its request count."""
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    built = Campaign(
        root,
        seed,
        check_every=args.check_every,
        restart_every=args.restart_every,
        machine=args.machine,
        indices=None if args.index is None else range(args.index, args.index + 1),
    )
    return built, args.requests


def main() -> int:
    args = parser().parse_args()
    root = short_tmpdir("fz")
    campaign, requests = build_campaign(args, root)
    seed = campaign.seed
    print(
        f"fuzz seed={seed} requests={requests} check_every={campaign.check_every} "
        f"restart_every={campaign.restart_every} machine={campaign.machine}",
        flush=True,
    )
    started = time.monotonic()
    try:
        campaign.start()
        campaign.run(requests)
    finally:
        campaign.stop()
        shutil.rmtree(root, ignore_errors=True)
    seconds = time.monotonic() - started
    print(campaign.histogram())
    print(
        f"fuzz seed={seed} sent={campaign.sent} seconds={seconds:.0f} "
        f"kinds={dict(campaign.kinds)} restarts={campaign.restarts} "
        f"max_rss={campaign.max_rss / 2**20:.0f}MiB slowest={campaign.slowest[0] * 1000:.0f}ms "
        f"({campaign.slowest[1]}) findings={len(campaign.findings)}"
    )
    print(campaign.cost.report())
    for finding in campaign.findings:
        print(finding.report())
    return 1 if campaign.findings else 0


if __name__ == "__main__":
    sys.exit(main())
