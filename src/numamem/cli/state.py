"""``numamem state``: the memory manager state, live from the daemon or offline from a file.

* ``numamem state [--socket S] [--json]``: the live per-NUMA table and assignments.
* ``numamem state show [--state-dir D] [--json]``: the same, read from
  ``<state-dir>/memory_manager_state`` without a daemon.
* ``numamem state verify [--state-dir D]``: decode and verify the checkpoint with
  the kubelet's rules, check the memory manager invariants and numamem's
  container map; prints what is wrong, exit code 1 if anything is.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from numamem.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_client_args,
    client_command,
    fail,
    human_bytes,
    message_to_dict,
    print_json,
    print_table,
)
from numamem.client import NumamemClient, state_from_proto
from numamem.config.model import DEFAULT_STATE_DIR
from numamem.memtypes import Block, NUMANodeState


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "state",
        help="show the memory manager state (live, or offline: show/verify a state dir)",
        description=(
            "numamem state [--socket S] [--json]: the live per-NUMA table and assignments.\n"
            "numamem state show [--state-dir D] [--json]: the same, read from\n"
            "  D/memory_manager_state without a daemon.\n"
            "numamem state verify [--state-dir D]: decode and verify the checkpoint with the\n"
            "  kubelet's rules, check the memory manager invariants and numamem's container map;\n"
            "  prints what is wrong, exit code 1 if anything is."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=("show", "verify"),
        help="offline: read the state dir instead of asking the daemon",
    )
    add_client_args(parser)
    parser.add_argument(
        "--state-dir",
        default=os.environ.get("NUMAMEM_STATE_DIR", DEFAULT_STATE_DIR),
        metavar="DIR",
        help="state dir for show/verify (default: %(default)s)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "verify":
        return verify(Path(args.state_dir))
    if args.action == "show":
        return show(Path(args.state_dir), as_json=args.json)
    return client_command(live)(args)


def live(args: argparse.Namespace, client: NumamemClient) -> int:
    resp = client.get_state()
    if args.json:
        print_json(message_to_dict(resp))
        return EXIT_OK
    machine, assignments = state_from_proto(resp)
    render(resp.policy_name, machine, assignments)
    return EXIT_OK


def render(
    policy: str,
    machine: Mapping[int, NUMANodeState | None],
    assignments: Mapping[str, Mapping[str, Sequence[Block]]],
) -> None:
    """The per-NUMA table, then one line per block."""
    print(f"policy: {policy}")
    rows = []
    for node_id in sorted(machine):
        node = machine[node_id]
        if node is None:
            rows.append([node_id, "-", "-", "-", "-", "-", "-", "-", "-"])
            continue
        tables = node.memory_map or {}
        for i, name in enumerate(sorted(tables, key=lambda n: (n != "memory", n))):
            t = tables[name]
            first = i == 0
            rows.append(
                [
                    node_id if first else "",
                    name,
                    human_bytes(t.total),
                    human_bytes(t.system_reserved),
                    human_bytes(t.allocatable),
                    human_bytes(t.reserved),
                    human_bytes(t.free),
                    ",".join(map(str, node.cells or [])) if first else "",
                    node.number_of_assignments if first else "",
                ]
            )
    print_table(
        [
            "NODE",
            "RESOURCE",
            "TOTAL",
            "SYSTEM-RESERVED",
            "ALLOCATABLE",
            "RESERVED",
            "FREE",
            "CELLS",
            "ASSIGNMENTS",
        ],
        rows,
    )
    blocks = [
        [pod, ctr, b.type, ",".join(map(str, b.numa_affinity or ())), human_bytes(b.size)]
        for pod in sorted(assignments)
        for ctr in sorted(assignments[pod])
        for b in assignments[pod][ctr]
    ]
    if blocks:
        print()
        print_table(["POD", "CONTAINER", "TYPE", "NUMA", "SIZE"], blocks)


def _load(state_dir: Path) -> Any:
    from numamem.checkpoint import kubelet
    from numamem.checkpoint.mmstore import STATE_FILE

    path = state_dir / STATE_FILE
    try:
        data = path.read_bytes()
    except OSError as err:
        return fail(f"cannot read {path}: {err.strerror}")
    return kubelet.load(data)


def show(state_dir: Path, *, as_json: bool) -> int:
    from numamem.errors import CheckpointError

    try:
        loaded = _load(state_dir)
    except CheckpointError as err:
        return fail(f"{state_dir}: {err}")
    if isinstance(loaded, int):
        return loaded
    if as_json:
        from numamem.checkpoint.kubelet import encode_v1

        print_json(
            json.loads(encode_v1(loaded.policy_name, loaded.machine_state, loaded.assignments))
        )
        return EXIT_OK
    render(loaded.policy_name, loaded.machine_state, loaded.assignments)
    return EXIT_OK


def verify(state_dir: Path) -> int:
    from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE, decode_containers
    from numamem.errors import CheckpointError
    from numamem.memorymanager.invariants import violations

    problems: list[str] = []
    try:
        loaded = _load(state_dir)
    except CheckpointError as err:
        print(f"{state_dir / STATE_FILE}: {err}")
        print("fix: drain the node, remove the file, restart numamem")
        return EXIT_FAILED
    if isinstance(loaded, int):
        return loaded
    print(
        f"{state_dir / STATE_FILE}: {loaded.format.upper()} checkpoint, checksum valid, "
        f"policy {loaded.policy_name!r}, {len(loaded.machine_state)} NUMA nodes, "
        f"{sum(len(c) for c in loaded.assignments.values())} containers in {len(loaded.assignments)} pods"
    )
    if loaded.machine_state:
        problems += violations(loaded.machine_state, loaded.assignments)
    elif loaded.assignments:
        problems.append("machine state is empty but there are memory assignments")
    containers = state_dir / CONTAINERS_FILE
    if containers.exists():
        try:
            ids = decode_containers(containers.read_bytes())
            print(f"{containers}: {len(ids)} container ids, checksum valid")
        except CheckpointError as err:
            problems.append(f"{containers}: {err}")
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        print("fix: drain the node, remove the files, restart numamem")
        return EXIT_FAILED
    print("OK")
    return EXIT_OK
