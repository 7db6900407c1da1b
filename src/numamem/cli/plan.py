"""``numamem plan-reservations``: a ``reservedMemory`` that passes validation on this machine.

The kubelet (and numamem) require the per-NUMA ``reservedMemory`` to add up, per
memory type, to exactly system-reserved + kube-reserved + the hard eviction
threshold (kubernetes#109766). This reads the machine (``--sysfs-root``) and those
flags (or ``--config``), and prints a reservation that passes: all on the first
NUMA node, or with ``--spread`` in proportion to each node's memory. Hugepages
are never in it: system-reserved and kube-reserved cannot reserve hugepages
(KEP-6252 proposes it), so any hugepage reservation fails the same validation.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from numamem.cli.common import EXIT_OK, fail
from numamem.config.flags.table import add_serve_arguments

FORMATS = ("all", "kubelet", "numamem", "flag")
RESERVATION_FLAGS = ("--sysfs-root", "--system-reserved", "--kube-reserved", "--eviction-hard")
"""The ``numamem serve`` flags this command reads (with ``--config``)."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "plan-reservations",
        help="print a reservedMemory that passes validation on this machine",
        description=(
            "Read this machine (--sysfs-root) and the reservation flags (--system-reserved, "
            "--kube-reserved, --eviction-hard; or --config) and print a reservedMemory whose "
            "totals equal system-reserved + kube-reserved + eviction-hard, as kubelet YAML, "
            "numamem YAML and the --reserved-memory flag."
        ),
    )
    add_serve_arguments(parser, only=RESERVATION_FLAGS)
    parser.add_argument(
        "--spread",
        action="store_true",
        help="divide each type over the nodes in proportion to their memory (default: all on "
        "the first node)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default="all", help="what to print (default: %(default)s)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from numamem.config.load import config_from_args
    from numamem.errors import NumamemError
    from numamem.memorymanager.state.reserved import (
        node_allocatable_reservation,
        plan_reserved_memory,
        reserved_memory_flag,
    )
    from numamem.topology.sysfs import discover

    try:
        cfg = config_from_args(args)
        machine = discover(cfg.sysfs_root)
        allocatable = node_allocatable_reservation(
            machine,
            dict(cfg.system_reserved),
            dict(cfg.kube_reserved),
            cfg.eviction_hard,
            machine.memory_capacity_bytes,
        )
        plan = plan_reserved_memory(machine, allocatable, spread=args.spread)
    except NumamemError as err:
        return fail(str(err))
    if not plan:
        return fail(
            "system-reserved + kube-reserved + eviction-hard reserve no memory, and the Static "
            "policy needs some: set --system-reserved memory=<size> first"
        )
    entries = [
        {"numaNode": r.numa_node, "limits": {name: str(q) for name, q in r.limits}} for r in plan
    ]
    flag = reserved_memory_flag(plan)
    kubelet = {"memoryManagerPolicy": "Static", "reservedMemory": entries}
    numamem = {
        "memoryManagerPolicy": "Static",
        "reservedMemory": entries,
        **(
            {"systemReserved": {k: str(q) for k, q in cfg.system_reserved}}
            if cfg.system_reserved
            else {}
        ),
        **(
            {"kubeReserved": {k: str(q) for k, q in cfg.kube_reserved}} if cfg.kube_reserved else {}
        ),
        "evictionHard": {
            t.signal: str(t.quantity)
            if t.quantity is not None
            else f"{float(t.percentage or 0) * 100:g}%"
            for t in cfg.eviction_hard
        },
    }
    if args.format in ("all", "kubelet"):
        if args.format == "all":
            print("# kubelet (KubeletConfiguration fields)")
        print(yaml.safe_dump(kubelet, sort_keys=False).rstrip())
    if args.format in ("all", "numamem"):
        if args.format == "all":
            print("\n# numamem --config FILE")
        print(yaml.safe_dump(numamem, sort_keys=False).rstrip())
    if args.format in ("all", "flag"):
        if args.format == "all":
            print("\n# numamem serve / kubelet flag")
        print(f"--reserved-memory '{flag}'")
    return EXIT_OK
