"""``numamem cache``: the metacache's containers, pools and regions."""

from __future__ import annotations

import argparse
from typing import Any

from numamem.cli.common import (
    EXIT_OK,
    add_client_args,
    client_command,
    message_to_dict,
    print_json,
    print_table,
)
from numamem.client import NumamemClient


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "cache",
        help="list the metacache's containers, pools and regions",
        description="Tables of the metacache entries (all three kinds unless one is named).",
    )
    parser.add_argument(
        "kind", nargs="?", choices=("containers", "pools", "regions"), help="only this kind"
    )
    parser.add_argument("--pod", default="", metavar="UID", help="containers of this pod only")
    add_client_args(parser)
    parser.set_defaults(run=client_command(run))


def _assignments(values: Any) -> str:
    return " ".join(f"{numa}:{cpus}" for numa, cpus in sorted(values.items())) or "-"


def run(args: argparse.Namespace, client: NumamemClient) -> int:
    kinds = [args.kind] if args.kind else ["containers", "pools", "regions"]
    data: dict[str, list[Any]] = {}
    if "containers" in kinds:
        data["containers"] = list(client.list_containers(args.pod))
    if "pools" in kinds:
        data["pools"] = list(client.list_pools())
    if "regions" in kinds:
        data["regions"] = list(client.list_regions())
    if args.json:
        print_json({kind: [message_to_dict(m) for m in items] for kind, items in data.items()})
        return EXIT_OK
    first = True
    for kind, items in data.items():
        if not first:
            print()
        first = False
        if kind == "containers":
            print_table(
                ["POD", "CONTAINER", "QOS", "CPU-REQ", "MEM-REQ", "POOL", "ASSIGNMENTS", "REGIONS"],
                [
                    [
                        c.pod_uid,
                        c.container_name,
                        c.qos_level or "-",
                        f"{c.cpu_request:g}",
                        f"{c.memory_request:g}",
                        c.owner_pool_name or "-",
                        _assignments(c.topology_aware_assignments),
                        ",".join(c.region_names) or "-",
                    ]
                    for c in items
                ],
            )
        elif kind == "pools":
            print_table(
                ["POOL", "ASSIGNMENTS", "ORIGINAL", "REGIONS"],
                [
                    [
                        p.pool_name,
                        _assignments(p.topology_aware_assignments),
                        _assignments(p.original_topology_aware_assignments),
                        ",".join(p.region_names) or "-",
                    ]
                    for p in items
                ],
            )
        else:
            print_table(
                ["REGION", "TYPE", "POOL", "NUMAS", "HEADROOM", "PODS"],
                [
                    [
                        r.region_name,
                        r.region_type or "-",
                        r.owner_pool_name or "-",
                        r.binding_numas or "-",
                        f"{r.headroom:g}",
                        len(r.pods),
                    ]
                    for r in items
                ],
            )
    return EXIT_OK
