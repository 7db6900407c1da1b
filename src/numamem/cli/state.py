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

from numamem.api.convert import pod_entries_from_proto
from numamem.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_client_args,
    add_json_flag,
    client_command,
    fail,
    guarded,
    human_bytes,
    message_to_dict,
    plural,
    print_json,
    print_table,
)
from numamem.client import NumamemClient, state_from_proto
from numamem.config.flags import add_serve_arguments
from numamem.config.model import DEFAULT_STATE_DIR
from numamem.errors import quote
from numamem.memtypes import Block, NUMANodeState

MACHINE_FLAGS = (
    "--state-dir",
    "--sysfs-root",
    "--proc-root",
    "--memory-manager-policy",
    "--memory-manager-policy-options",
    "--reserved-memory",
    "--system-reserved",
    "--kube-reserved",
    "--eviction-hard",
    "--topology-manager-policy",
    "--topology-manager-scope",
    "--topology-manager-policy-options",
    "--feature-gates",
)
"""The ``numamem serve`` flags ``state verify`` and ``state diff`` read (with ``--config``):
what the memory manager's start-up check depends on."""


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
    add_json_flag(
        show_parser, "print the file's JSON (the kubelet's own field names)", inherit=True
    )
    show_parser.set_defaults(run=lambda a: show(Path(a.state_dir), as_json=a.json))
    for name, helptext, runner in (
        (
            "verify",
            "check the state file, and the state against this machine and configuration "
            "(the machine and memory manager flags of numamem serve, or --config); exit code 1 "
            "if numamem serve would refuse to start",
            run_verify,
        ),
        (
            "diff",
            "the stored machine state beside the one recomputed from this machine and "
            "configuration, node by node; exit code 1 when they differ (as diff(1))",
            run_diff,
        ),
    ):
        action = actions.add_parser(name, help=helptext, description=helptext)
        add_serve_arguments(action, only=MACHINE_FLAGS)
        add_json_flag(action, inherit=True)
        action.set_defaults(run=runner)


def run_live(args: argparse.Namespace) -> int:
    return client_command(live)(args)


def live(args: argparse.Namespace, client: NumamemClient) -> int:
    resp = client.get_state()
    if args.json:
        print_json(message_to_dict(resp))
        return EXIT_OK
    machine, assignments = state_from_proto(resp)
    names = {
        uid: (entry.namespace, entry.name)
        for uid, entry in resp.entries.items()
        if entry.namespace or entry.name
    }
    render(resp.policy_name, machine, assignments, names, pod_entries_from_proto(resp))
    return EXIT_OK


POD_LEVEL = "(pod-level)"
"""The CONTAINER column of a pod-level block (pod-level resources, KEP-5526)."""


def render(
    policy: str,
    machine: Mapping[int, NUMANodeState | None],
    assignments: Mapping[str, Mapping[str, Sequence[Block]]],
    names: Mapping[str, tuple[str, str]] | None = None,
    pod_entries: Mapping[str, Sequence[Block]] | None = None,
) -> None:
    """The per-NUMA table, then one line per block; pods as ``namespace/name (uid)`` where
    their names were recorded; a pod allocated as a whole shows its pod-level blocks first
    (container ``(pod-level)``)."""
    from numamem.memorymanager.drift import pod_label

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
    pod_entries = pod_entries or {}
    blocks = [
        [
            pod_label(pod, names or {}),
            ctr,
            b.type,
            ",".join(map(str, b.numa_affinity or ())),
            human_bytes(b.size),
        ]
        for pod in sorted(set(assignments) | set(pod_entries))
        for ctr, pod_blocks in (
            *([(POD_LEVEL, pod_entries[pod])] if pod in pod_entries else []),
            *sorted(assignments.get(pod, {}).items()),
        )
        for b in pod_blocks
    ]
    if blocks:
        print()
        print_table(["POD", "CONTAINER", "TYPE", "NUMA", "SIZE"], blocks)


def _load(state_dir: Path) -> Any:
    """The decoded ``memory_manager_state`` of ``state_dir``; an exit code (1) when it cannot
    be read; raises CheckpointError naming the file when it does not decode."""
    from numamem.checkpoint import kubelet
    from numamem.checkpoint.mmstore import STATE_FILE
    from numamem.errors import CheckpointError

    path = state_dir / STATE_FILE
    try:
        data = path.read_bytes()
    except OSError as err:
        return fail(f"cannot read {path}: {err.strerror}")
    try:
        return kubelet.load(data)
    except CheckpointError as err:
        raise CheckpointError(f"{path}: {err}") from err


def show(state_dir: Path, *, as_json: bool) -> int:
    from numamem.errors import CheckpointError

    try:
        loaded = _load(state_dir)
    except CheckpointError as err:
        return fail(str(err))
    if isinstance(loaded, int):
        return loaded
    if as_json:
        from numamem.checkpoint.kubelet import encode_v1, encode_v3

        if loaded.pod_entries:
            text = encode_v3(
                loaded.policy_name, loaded.machine_state, loaded.assignments, loaded.pod_entries
            )
        else:
            text = encode_v1(loaded.policy_name, loaded.machine_state, loaded.assignments)
        print_json(json.loads(text))
        return EXIT_OK
    render(
        loaded.policy_name,
        loaded.machine_state,
        loaded.assignments,
        _names(state_dir),
        loaded.pod_entries,
    )
    return EXIT_OK


def _names(state_dir: Path) -> dict[str, tuple[str, str]]:
    """The pod names recorded beside the state (none where the files are missing or do not
    decode: ``state verify`` reports that)."""
    from numamem.checkpoint.mmstore import recorded_names

    return recorded_names(state_dir)


def check_files(state_dir: Path) -> dict[str, Any] | int:
    """The offline checks of the state files: a report (``problems`` empty when they pass),
    or an exit code when the state file cannot be read."""
    from numamem.checkpoint.containerfile import decode_containers
    from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE
    from numamem.checkpoint.namesfile import NAMES_FILE, read_names
    from numamem.errors import CheckpointError
    from numamem.memorymanager.invariants import violations

    report: dict[str, Any] = {"file": str(state_dir / STATE_FILE), "problems": []}
    try:
        loaded = _load(state_dir)
    except CheckpointError as err:
        report["problems"].append(str(err))
        return report
    if isinstance(loaded, int):
        return loaded
    containers = sum(len(c) for c in loaded.assignments.values())
    report.update(
        format=loaded.format,
        checksum_valid=True,
        policy=loaded.policy_name,
        numa_nodes=len(loaded.machine_state),
        pods=len(loaded.assignments),
        containers=containers,
        summary=(
            f"{loaded.format.upper()} checkpoint, checksum valid, policy "
            f"{quote(loaded.policy_name)}, {plural(len(loaded.machine_state), 'NUMA node')}, "
            f"{plural(containers, 'container')} in {plural(len(loaded.assignments), 'pod')}"
            + (
                f", {plural(len(loaded.pod_entries), 'pod')} allocated as a whole (pod-level)"
                if loaded.pod_entries
                else ""
            )
        ),
    )
    if loaded.machine_state:
        report["problems"] += violations(
            loaded.machine_state, loaded.assignments, loaded.pod_entries
        )
    elif loaded.assignments:
        report["problems"].append("machine state is empty but there are memory assignments")
    path = state_dir / CONTAINERS_FILE
    if path.exists():
        try:
            ids = decode_containers(path.read_bytes())
            report["container_map"] = {"file": str(path), "container_ids": len(ids)}
        except CheckpointError as err:
            report["problems"].append(f"{path}: {err}")
    names_path = state_dir / NAMES_FILE
    if names_path.exists():
        found = read_names(names_path.read_bytes(), names_path)
        recorded, held = set(found.names), set(loaded.assignments)
        report["pod_names"] = {
            "file": str(names_path),
            "names": len(recorded & held),
            "inert": len(recorded - held),
            "torn_bytes": found.torn,
        }
        if found.damage is not None:  # the daemon sets the file aside and keeps what it read
            report["problems"].append(found.damage)
    return report


def _print_files_report(report: Mapping[str, Any]) -> None:
    if "summary" in report:
        print(f"{report['file']}: {report['summary']}")
    container_map = report.get("container_map")
    if container_map:
        print(
            f"{container_map['file']}: {plural(container_map['container_ids'], 'container id')}, "
            "checksum valid"
        )
    names = report.get("pod_names")
    if names:
        torn = (
            f", a torn last record of {plural(names['torn_bytes'], 'byte')} (a crash's; dropped "
            "at start)"
            if names["torn_bytes"]
            else ""
        )
        print(
            f"{names['file']}: {plural(names['names'], 'pod name')} of pods with state, "
            f"{names['inert']} inert{torn}"
        )
    for problem in report["problems"]:
        print(guarded(problem) if "summary" not in report else f"problem: {guarded(problem)}")


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
    report = check_files(Path(cfg.state_dir))
    if isinstance(report, int):
        return report
    if not report["problems"]:
        report["machine"] = _against_machine(cfg)
    ok = not report["problems"] and report["machine"]["result"] != "refused"
    report["ok"] = ok
    if args.json:
        print_json(report)
        return EXIT_OK if ok else EXIT_FAILED
    _print_files_report(report)
    if report["problems"]:
        print("fix: drain the node, remove the files, restart numamem")
        return EXIT_FAILED
    machine = report["machine"]
    print(guarded(machine["message"]))
    for line in machine.get("differences", []):
        print(f"  {guarded(line)}")
    if ok:
        print("OK")
    return EXIT_OK if ok else EXIT_FAILED


def _against_machine(cfg: Any) -> dict[str, Any]:
    """What numamem serve with ``cfg`` would do with the state at start: ``result`` matches,
    rebaselined or refused, with the message it would print."""
    from numamem.api.memorymanager import build_manager, state_store
    from numamem.errors import NumamemError, StateMismatchError
    from numamem.topology.sysfs import discover

    try:
        machine = discover(cfg.sysfs_root)
        manager = build_manager(cfg, machine, state_store(cfg))
        manager.load()
    except StateMismatchError as err:
        return {"result": "refused", "message": str(err)}
    except NumamemError as err:
        return {
            "result": "refused",
            "message": f"numamem serve with this configuration would refuse to start: {err}",
        }
    verdict = getattr(manager.policy, "last_verdict", None)
    if verdict is not None and verdict.rebaseline is not None:
        tolerance = manager.policy.options.tolerance.text  # type: ignore[attr-defined]
        return {
            "result": "rebaselined",
            "tolerance": tolerance,
            "message": (
                f"accepted with memory-drift-tolerance={tolerance}: this machine differs from "
                "the stored state, every stored block still fits and keeps its nodes; numamem "
                "serve re-baselines the state at start:"
            ),
            "differences": [diff.line() for diff in verdict.differences],
        }
    return {
        "result": "matches",
        "message": (
            f"matches this machine and configuration ({cfg.sysfs_root}, policy "
            f"{cfg.memory_manager_policy})"
        ),
    }


def run_diff(args: argparse.Namespace) -> int:
    """Stored vs recomputed (this machine, this configuration, the stored blocks): exit 0 when
    they are equal, 1 when they differ (as diff(1)), with a one-line verdict either way."""
    from numamem.api.memorymanager import build_manager, state_store
    from numamem.checkpoint.mmstore import STATE_FILE
    from numamem.errors import CheckpointError, NumamemError
    from numamem.memorymanager.drift import diff_states, replay_strict
    from numamem.memorymanager.podlevel import accounted_assignments
    from numamem.topology.sysfs import discover

    try:
        cfg = _configured(args)
        machine = discover(cfg.sysfs_root)
        manager = build_manager(cfg, machine, state_store(cfg))
    except NumamemError as err:
        return fail(str(err))
    policy = manager.policy
    if not hasattr(policy, "default_machine_state"):
        return fail(f"policy {quote(policy.name)} keeps no machine state; nothing to compare")
    try:
        loaded = _load(Path(cfg.state_dir))
    except CheckpointError as err:
        return fail(str(err))
    if isinstance(loaded, int):
        return loaded
    recomputed = policy.default_machine_state()
    misfits = replay_strict(
        recomputed,
        accounted_assignments(loaded.assignments, loaded.pod_entries),
        _names(Path(cfg.state_dir)),
    )
    differing = {
        (d.node, d.resource, d.field) for d in diff_states(loaded.machine_state, recomputed)
    }
    rows: list[dict[str, Any]] = []

    def row(node: int, resource: str, label: str, stored: Any, now: Any, differs: bool) -> None:
        rows.append(
            {
                "node": node,
                "resource": resource,
                "field": label,
                "stored": stored,
                "now": now,
                "differs": differs,
            }
        )

    for node_id in sorted(set(loaded.machine_state) | set(recomputed)):
        a, e = loaded.machine_state.get(node_id), recomputed.get(node_id)
        if a is None or e is None:
            row(node_id, "", "node", _present(a), _present(e), True)
            continue
        for label, x, y in (
            ("NumberOfAssignments", a.number_of_assignments, e.number_of_assignments),
            ("Cells", sorted(a.cells or []), sorted(e.cells or [])),
        ):
            row(node_id, "", label, x, y, x != y)
        a_map, e_map = a.memory_map or {}, e.memory_map or {}
        for name in sorted(set(a_map) | set(e_map), key=lambda n: (n != "memory", n)):
            at, et = a_map.get(name), e_map.get(name)
            if at is None or et is None:
                row(node_id, name, "type", _present(at), _present(et), True)
                continue
            for label, attr in (
                ("TotalMemSize", "total"),
                ("SystemReserved", "system_reserved"),
                ("Allocatable", "allocatable"),
                ("Reserved", "reserved"),
                ("Free", "free"),
            ):
                differs = (node_id, name, label) in differing or (
                    label in ("Reserved", "Free")
                    and (node_id, name, f"{label} (group sum)") in differing
                )
                row(node_id, name, label, getattr(at, attr), getattr(et, attr), differs)
    changed = [r for r in rows if r["differs"]]
    nodes = sorted({r["node"] for r in changed})
    if changed or misfits:
        parts = []
        if changed:
            parts.append(
                f"{plural(len(changed), 'field')} differ{'s' if len(changed) == 1 else ''} on "
                f"{plural(len(nodes), 'node')} ({', '.join(map(str, nodes))})"
            )
        if misfits:
            parts.append(f"{plural(len(misfits), 'stored block')} would not fit")
        verdict = "; ".join(parts) + ": `numamem state verify` says whether serve would accept it"
    else:
        verdict = "no differences: the stored state is what this machine and configuration give"
    stored_file = str(Path(cfg.state_dir) / STATE_FILE)
    if args.json:
        print_json(
            {
                "stored": stored_file,
                "now": cfg.sysfs_root,
                "rows": rows,
                "misfits": misfits,
                "differs": bool(changed or misfits),
                "verdict": verdict,
            }
        )
        return EXIT_FAILED if changed or misfits else EXIT_OK
    print(f"stored: {stored_file}; now: {cfg.sysfs_root} and the configuration")
    print_table(
        ["NODE", "RESOURCE", "FIELD", "STORED", "NOW", "DIFFERS"],
        [
            [
                r["node"],
                r["resource"] or "-",
                r["field"],
                _cell(r["field"], r["stored"]),
                _cell(r["field"], r["now"]),
                "*" if r["differs"] else "",
            ]
            for r in rows
        ],
    )
    for misfit in misfits:
        print(guarded(misfit))
    print(verdict)
    return EXIT_FAILED if changed or misfits else EXIT_OK


def _cell(label: str, value: Any) -> str:
    if isinstance(value, int) and label not in ("NumberOfAssignments",):
        return human_bytes(value)
    return str(value)


def _present(value: object) -> str:
    return "present" if value is not None else "absent"
