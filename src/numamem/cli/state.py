"""``numamem state``: the memory manager state, live from the daemon or offline from a file.

* ``numamem state [--socket S] [--json]``: the live per-NUMA table and assignments.
* ``numamem state show [--state-dir D] [--json]``: the same, read from
  ``<state-dir>/memory_manager_state`` without a daemon.
* ``numamem state verify [serve flags | --config FILE]``: decode and verify the
  checkpoint with the kubelet's rules, check the memory manager invariants and
  numamem's container map, and check the state **against this machine and
  configuration** exactly as ``numamem serve`` with the same flags would at start:
  the same report when it would refuse, what it would re-baseline when it would
  accept a changed machine. Exit code 1 if the start would be refused.
* ``numamem state diff [serve flags | --config FILE]``: the stored machine state
  beside the one recomputed from this machine, the configuration and the stored
  blocks, node by node (``*`` marks what differs).
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
from numamem.config.flags import add_serve_arguments
from numamem.config.model import DEFAULT_STATE_DIR
from numamem.errors import quote
from numamem.memtypes import Block, NUMANodeState


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "state",
        help="show the memory manager state (live; or offline: show, verify against this "
        "machine, diff)",
        description=(
            "numamem state [--socket S] [--json]: the live per-NUMA table and assignments.\n"
            "numamem state show [--state-dir D] [--json]: the same, read from\n"
            "  D/memory_manager_state without a daemon.\n"
            "numamem state verify [serve flags | --config FILE]: check the state file with the\n"
            "  kubelet's rules, then check it against this machine and configuration as\n"
            "  numamem serve with the same flags would at start; exit code 1 if it would refuse.\n"
            "numamem state diff [serve flags | --config FILE]: the stored machine state beside\n"
            "  the one recomputed from this machine and configuration, node by node."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_client_args(parser)
    parser.set_defaults(run=run_live)
    actions = parser.add_subparsers(dest="action", metavar="{show,verify,diff}")
    show_parser = actions.add_parser("show", help="print D/memory_manager_state without a daemon")
    show_parser.add_argument(
        "--state-dir",
        default=os.environ.get("NUMAMEM_STATE_DIR", DEFAULT_STATE_DIR),
        metavar="DIR",
        help="state dir (default: %(default)s)",
    )
    show_parser.add_argument("--json", action="store_true", help="print JSON")
    show_parser.set_defaults(run=lambda a: show(Path(a.state_dir), as_json=a.json))
    for name, helptext, runner in (
        (
            "verify",
            "check the state file, and the state against this machine and configuration "
            "(the flags of numamem serve, or --config)",
            run_verify,
        ),
        (
            "diff",
            "the stored machine state beside the one recomputed from this machine and "
            "configuration, node by node",
            run_diff,
        ),
    ):
        action = actions.add_parser(name, help=helptext, description=helptext)
        add_serve_arguments(action)
        action.set_defaults(run=runner)


def run_live(args: argparse.Namespace) -> int:
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
        f"policy {quote(loaded.policy_name)}, {len(loaded.machine_state)} NUMA nodes, "
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


# --- against this machine and configuration ---------------------------------------------


def _configured(args: argparse.Namespace) -> Any:
    from numamem.config.load import config_from_args

    return config_from_args(args)


def run_verify(args: argparse.Namespace) -> int:
    """The file checks, then the start-up check numamem serve with these flags would make."""
    from numamem.errors import NumamemError

    try:
        cfg = _configured(args)
    except NumamemError as err:
        return fail(str(err))
    state_dir = Path(cfg.state_dir)
    status = verify(state_dir)
    if status != EXIT_OK:
        return status
    return _against_machine(cfg)


def _against_machine(cfg: Any) -> int:
    from numamem.api.memorymanager import build_manager
    from numamem.checkpoint.mmstore import KubeletStateStore
    from numamem.errors import NumamemError, StateMismatchError
    from numamem.topology.sysfs import discover

    try:
        machine = discover(cfg.sysfs_root)
        manager = build_manager(cfg, machine, KubeletStateStore(cfg.state_dir))
        manager.load()
    except StateMismatchError as err:
        print(err)
        return EXIT_FAILED
    except NumamemError as err:
        print(f"numamem serve with this configuration would refuse to start: {err}")
        return EXIT_FAILED
    verdict = getattr(manager.policy, "last_verdict", None)
    if verdict is not None and verdict.rebaseline is not None:
        tolerance = manager.policy.options.tolerance.text  # type: ignore[attr-defined]
        print(
            f"accepted with memory-drift-tolerance={tolerance}: this machine differs from the "
            "stored state, every stored block still fits and keeps its nodes; numamem serve "
            "re-baselines the state at start:"
        )
        for diff in verdict.differences:
            print(f"  {diff.line()}")
    else:
        print(
            f"matches this machine and configuration ({cfg.sysfs_root}, policy {cfg.memory_manager_policy})"
        )
    print("OK")
    return EXIT_OK


def run_diff(args: argparse.Namespace) -> int:
    """Stored vs recomputed (this machine, this configuration, the stored blocks)."""
    from numamem.api.memorymanager import build_manager
    from numamem.checkpoint.mmstore import KubeletStateStore
    from numamem.errors import CheckpointError, NumamemError
    from numamem.memorymanager.drift import diff_states, replay_strict
    from numamem.topology.sysfs import discover

    try:
        cfg = _configured(args)
        machine = discover(cfg.sysfs_root)
        manager = build_manager(cfg, machine, KubeletStateStore(cfg.state_dir))
    except NumamemError as err:
        return fail(str(err))
    policy = manager.policy
    if not hasattr(policy, "default_machine_state"):
        return fail(f"policy {quote(policy.name)} keeps no machine state; nothing to compare")
    try:
        loaded = _load(Path(cfg.state_dir))
    except CheckpointError as err:
        return fail(f"{cfg.state_dir}: {err}")
    if isinstance(loaded, int):
        return loaded
    recomputed = policy.default_machine_state()
    misfits = replay_strict(recomputed, loaded.assignments)
    differing = {
        (d.node, d.resource, d.field) for d in diff_states(loaded.machine_state, recomputed)
    }
    rows = []
    for node_id in sorted(set(loaded.machine_state) | set(recomputed)):
        a, e = loaded.machine_state.get(node_id), recomputed.get(node_id)
        if a is None or e is None:
            rows.append([node_id, "-", "node", _present(a), _present(e), "*"])
            continue
        for label, x, y in (
            ("NumberOfAssignments", a.number_of_assignments, e.number_of_assignments),
            ("Cells", sorted(a.cells or []), sorted(e.cells or [])),
        ):
            rows.append([node_id, "-", label, str(x), str(y), "*" if x != y else ""])
        a_map, e_map = a.memory_map or {}, e.memory_map or {}
        for name in sorted(set(a_map) | set(e_map), key=lambda n: (n != "memory", n)):
            at, et = a_map.get(name), e_map.get(name)
            if at is None or et is None:
                rows.append([node_id, name, "type", _present(at), _present(et), "*"])
                continue
            for label, attr in (
                ("TotalMemSize", "total"),
                ("SystemReserved", "system_reserved"),
                ("Allocatable", "allocatable"),
                ("Reserved", "reserved"),
                ("Free", "free"),
            ):
                x, y = getattr(at, attr), getattr(et, attr)
                mark = (
                    "*"
                    if (node_id, name, label) in differing
                    or (
                        label in ("Reserved", "Free")
                        and (node_id, name, f"{label} (group sum)") in differing
                    )
                    else ""
                )
                rows.append([node_id, name, label, human_bytes(x), human_bytes(y), mark])
    print(
        f"stored: {Path(cfg.state_dir) / 'memory_manager_state'}; now: {cfg.sysfs_root} and the configuration"
    )
    print_table(["NODE", "RESOURCE", "FIELD", "STORED", "NOW", "DIFFERS"], rows)
    for misfit in misfits:
        print(misfit)
    return EXIT_OK


def _present(value: object) -> str:
    return "present" if value is not None else "absent"
