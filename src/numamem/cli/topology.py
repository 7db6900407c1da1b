"""``numamem topology``: the machine as the daemon discovered it."""

from __future__ import annotations

import argparse
from typing import Any

from numamem.cli.common import (
    EXIT_OK,
    add_client_args,
    client_command,
    human_bytes,
    message_to_dict,
    print_json,
    print_table,
)
from numamem.client import NumamemClient
from numamem.cpuset import format_cpulist


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "topology",
        help="show the NUMA topology the daemon discovered",
        description="Print the NUMA nodes: kind (CPUs or memory-only, generic initiator, memory "
        "tier), memory, CPUs, hugepages (free read live), distances; then discovery's warnings.",
    )
    add_client_args(parser)
    parser.set_defaults(run=client_command(run))


def run(args: argparse.Namespace, client: NumamemClient) -> int:
    info = client.get_machine_info()
    if args.json:
        print_json(message_to_dict(info))
        return EXIT_OK
    rows = []
    for node in info.numa_nodes:
        kind = "cpu" if node.has_cpus else "memory-only"
        if node.generic_initiator:
            kind += ", generic initiator"
        if node.HasField("memory_tier"):
            kind += f", tier {node.memory_tier}"
        pages = ", ".join(
            f"{human_bytes(hp.page_size_bytes)}: {hp.free_pages}/{hp.total_pages} free"
            for hp in node.hugepages
        )
        rows.append(
            [
                node.id,
                kind,
                human_bytes(node.memory_bytes),
                format_cpulist(node.cpus) or "-",
                pages or "-",
                " ".join(str(d) for d in node.distances) or "-",
            ]
        )
    print_table(["NODE", "KIND", "MEMORY", "CPUS", "HUGEPAGES", "DISTANCES"], rows)
    for warning in info.warnings:
        print(f"warning: {warning}")
    return EXIT_OK
