"""``numamem state verify`` and the offline reading of the state files ``state show`` and
``state diff`` share: decode and verify the checkpoint with the kubelet's rules, check the
memory manager invariants and numamem's container map and names file, then check the state
against this machine and configuration exactly as ``numamem serve`` with the same flags would
at start. A refusal is printed as the daemon prints it: several lines (the message, what
differs, the fix), each shown as :func:`~numamem.cli.common.guarded_lines` shows it.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from numamem.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    fail,
    guarded_lines,
    plural,
    print_json,
)
from numamem.errors import quote


def load(state_dir: Path, current: Any = None) -> Any:
    """The decoded ``memory_manager_state`` of ``state_dir`` (``current``: its
    :func:`~numamem.checkpoint.mmcurrent.current_source`, when the caller read it); an exit
    code (1) when it cannot be read; raises CheckpointError naming the file when it (or a
    damaged journal) does not decode."""
    from numamem.checkpoint import kubelet
    from numamem.errors import CheckpointError

    if current is None:
        current = read_current(state_dir)
        if isinstance(current, int):
            return current
    path, data = current.state_source, current.state
    if data is None:
        return fail(f"cannot read {path}: No such file or directory")
    try:
        return kubelet.load(data)
    except CheckpointError as err:
        raise CheckpointError(f"{path}: {err}") from err


def read_current(state_dir: Path) -> Any:
    """:func:`~numamem.checkpoint.mmcurrent.current_source` of ``state_dir``, or an exit code
    (1) when a file cannot be read; CheckpointError for a damaged journal."""
    from numamem.checkpoint.mmcurrent import current_source
    from numamem.checkpoint.mmstore import STATE_FILE

    try:
        return current_source(state_dir)
    except OSError as err:
        return fail(f"cannot read {err.filename or state_dir / STATE_FILE}: {err.strerror}")


def names(state_dir: Path) -> dict[str, tuple[str, str]]:
    """The pod names recorded beside the state (none where the files are missing or do not
    decode: ``state verify`` reports that)."""
    from numamem.checkpoint.mmstore import recorded_names

    return recorded_names(state_dir)


def shared_containers(containers: bytes | None, loaded: Any) -> dict[str, set[str]]:
    """Pod uid -> the containers that share the pod's pool, for the pods allocated as a whole
    in ``loaded`` (as GetState's isolation says it: numamem's record of the containers with
    memory of their own in the container map ``containers``, as a restart reads it; none
    recorded, all share)."""
    from numamem.checkpoint.containerfile import read_container_file
    from numamem.errors import CheckpointError
    from numamem.memorymanager.requests import podlevel

    exclusive: Mapping[str, frozenset[str]] = {}
    if containers is not None:
        with contextlib.suppress(CheckpointError):  # `state verify` reports the file
            exclusive = read_container_file(containers).exclusive
    return {
        pod: {
            name
            for name, blocks in loaded.assignments.get(pod, {}).items()
            if podlevel.isolation_level(blocks, pod_blocks, exclusive.get(pod, frozenset()), name)
            == podlevel.POD
        }
        for pod, pod_blocks in loaded.pod_entries.items()
    }


def check_files(state_dir: Path) -> dict[str, Any] | int:
    """The offline checks of the state files: a report (``problems`` empty when they pass),
    or an exit code when the state file cannot be read."""
    from numamem.checkpoint.containerfile import decode_containers
    from numamem.checkpoint.mmjournal import JOURNAL_FILE
    from numamem.checkpoint.mmstore import STATE_FILE
    from numamem.checkpoint.namesfile import NAMES_FILE, read_names
    from numamem.errors import CheckpointError
    from numamem.memorymanager.state.invariants import violations

    report: dict[str, Any] = {"file": str(state_dir / STATE_FILE), "problems": []}
    try:
        current = read_current(state_dir)
        if isinstance(current, int):
            return current
        report["file"] = str(current.state_source)
        loaded = load(state_dir, current)
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
    if current.journal is not None:
        report["journal"] = {
            "file": str(state_dir / JOURNAL_FILE),
            "records": current.journal.records,
            "torn_bytes": current.journal.torn,
        }
    if current.containers is not None:
        path = current.containers_source
        try:
            ids = decode_containers(current.containers)
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
        if found.damage is not None:  # the daemon keeps a copy of the file and what it read
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
    journal = report.get("journal")
    if journal:
        from numamem.checkpoint.mmstore import STATE_FILE

        records = journal["records"]
        print(
            f"{journal['file']}: "
            + (
                f"{plural(records, 'record')} that {STATE_FILE} is behind (folded at a "
                "graceful stop)"
                if records
                else f"no records ({STATE_FILE} is current)"
            )
            + (
                f", a torn last record of {plural(journal['torn_bytes'], 'byte')}"
                if journal["torn_bytes"]
                else ""
            )
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
        print(
            guarded_lines(problem)
            if "summary" not in report
            else f"problem: {guarded_lines(problem)}"
        )


# --- against this machine and configuration ---------------------------------------------


def configured(args: argparse.Namespace) -> Any:
    from numamem.config.load import config_from_args

    return config_from_args(args)


def verify(args: argparse.Namespace) -> int:
    """The file checks, then the start-up check numamem serve with these flags would make."""
    from numamem.errors import NumamemError

    try:
        cfg = configured(args)
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
    print(guarded_lines(machine["message"]))
    for line in machine.get("differences", []):
        print(guarded_lines(line, indent="  "))
    if ok:
        print("OK")
    return EXIT_OK if ok else EXIT_FAILED


def _against_machine(cfg: Any) -> dict[str, Any]:
    """What numamem serve with ``cfg`` would do with the state at start: ``result`` matches,
    rebaselined or refused, with the message it would print."""
    from numamem.api.build import build_manager, state_store
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
