"""``numamem state diff``: the stored machine state beside the one recomputed from this
machine, the configuration and the stored blocks, node by node (``*`` marks what differs)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from numamem.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    fail,
    guarded_lines,
    human_bytes,
    plural,
    print_json,
    print_table,
)
from numamem.cli.state_check import configured, load, names
from numamem.errors import quote


def diff(args: argparse.Namespace) -> int:
    """Stored vs recomputed (this machine, this configuration, the stored blocks): exit 0 when
    they are equal, 1 when they differ (as diff(1)), with a one-line verdict either way."""
    from numamem.api.build import build_manager, state_store
    from numamem.checkpoint.mmstore import STATE_FILE
    from numamem.errors import CheckpointError, NumamemError
    from numamem.memorymanager.requests.podlevel import accounted_assignments
    from numamem.memorymanager.state.differences import diff_states, replay_strict
    from numamem.topology.sysfs import discover

    try:
        cfg = configured(args)
        machine = discover(cfg.sysfs_root)
        manager = build_manager(cfg, machine, state_store(cfg))
    except NumamemError as err:
        return fail(str(err))
    policy = manager.policy
    if not hasattr(policy, "default_machine_state"):
        return fail(f"policy {quote(policy.name)} keeps no machine state; nothing to compare")
    try:
        loaded = load(Path(cfg.state_dir))
    except CheckpointError as err:
        return fail(str(err))
    if isinstance(loaded, int):
        return loaded
    recomputed = policy.default_machine_state()
    misfits = replay_strict(
        recomputed,
        accounted_assignments(loaded.assignments, loaded.pod_entries),
        names(Path(cfg.state_dir)),
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
        print(guarded_lines(misfit))
    print(verdict)
    return EXIT_FAILED if changed or misfits else EXIT_OK


def _cell(label: str, value: Any) -> str:
    if isinstance(value, int) and label not in ("NumberOfAssignments",):
        return human_bytes(value)
    return str(value)


def _present(value: object) -> str:
    return "present" if value is not None else "absent"
