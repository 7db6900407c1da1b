"""``numamem residency``: where each pinned container's memory really is (GetResidency)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from numamem.cli.common import (
    EXIT_OK,
    UsageError,
    add_client_args,
    client_command,
    guarded,
    human_bytes,
    message_to_dict,
    print_json,
    print_table,
    shown,
)
from numamem.client import NumamemClient
from numamem.cpuset import format_cpulist
from numamem.v1 import memorymanager_pb2 as mm

_STATUS = {
    mm.RESIDENCY_MEASURED: "measured",
    mm.RESIDENCY_PENDING: "pending",
    mm.RESIDENCY_NO_CONTAINER_ID: "no container id",
    mm.RESIDENCY_NO_CGROUP: "no cgroup",
    mm.RESIDENCY_NO_NUMA_STAT: "no numa_stat",
    mm.RESIDENCY_UNREADABLE: "UNREADABLE",
}
_ENFORCEMENT = {
    mm.CPUSET_ENFORCEMENT_CONTESTED: "contested",
    mm.CPUSET_ENFORCEMENT_PARENT_DISALLOWS: "parent disallows",
    mm.CPUSET_ENFORCEMENT_STOPPED: "stopped",
}
"""What holds --enforce-cpuset-mems back, as the CPUSET.MEMS column and the lines below say."""
LEGEND = (
    "* = a node the memory manager assigned; MEMORY BY NODE = user memory and hugetlb pages "
    "(--json: per type); OUTSIDE = memory on the other nodes and its share "
    "(page cache and shared memory stay on the node they were first allocated on; only page "
    "cache is reclaimable, and v2's file includes shmem: docs/residency.md "
    "in the numamem source)."
)


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "residency",
        help="show where pinned containers' memory is, per NUMA node, and their cpuset.mems",
        description=(
            "Per pinned container (memory-manager blocks and a runtime id): the assigned NUMA "
            "nodes, the bytes per node the kernel reports in the cgroup's memory.numa_stat, the "
            "bytes outside the assigned nodes and their share, and the cpuset.mems the kernel "
            "enforces (DIFFERS when it is not the assignment). From the metrics collector's last "
            "round (--metric-interval)."
        ),
    )
    parser.add_argument("--pod", metavar="UID", default="", help="only this pod's containers")
    parser.add_argument(
        "--container", metavar="NAME", default="", help="only this container (needs --pod)"
    )
    add_client_args(parser)
    parser.set_defaults(run=client_command(run))


def pod_text(r: mm.ContainerResidency) -> str:
    """``namespace/name (uid)`` when the names are known, else the uid (each escaped)."""
    if r.pod_namespace or r.pod_name:
        return f"{shown(r.pod_namespace)}/{shown(r.pod_name)} ({shown(r.pod_uid)})"
    return shown(r.pod_uid)


def _nodes_text(r: mm.ContainerResidency) -> str:
    if r.status != mm.RESIDENCY_MEASURED:
        return "-"
    return (
        "  ".join(f"{n.node}{'*' if n.assigned else ''}: {human_bytes(n.bytes)}" for n in r.nodes)
        or "none"
    )


def _outside_text(r: mm.ContainerResidency) -> str:
    if r.status != mm.RESIDENCY_MEASURED:
        return "-"
    return f"{human_bytes(r.outside_bytes)} ({r.outside_share:.1%})"


def _cpuset_text(r: mm.ContainerResidency) -> str:
    held = (
        f" ({_ENFORCEMENT[r.cpuset_enforcement]})" if r.cpuset_enforcement in _ENFORCEMENT else ""
    )
    if r.cpuset_mems_state == mm.CPUSET_MEMS_MATCHES:
        return f"{format_cpulist(r.cpuset_mems)} ok{held}"
    if r.cpuset_mems_state == mm.CPUSET_MEMS_DIFFERS:
        return f"{format_cpulist(r.cpuset_mems) or '(empty)'} DIFFERS{held}"
    if r.cpuset_mems_state == mm.CPUSET_MEMS_UNKNOWN:
        return "unknown"
    return "-"


def print_residency(rows: Sequence[mm.ContainerResidency], indent: str = "") -> None:
    """The table, then one line per container that needs a word (why, a write)."""
    headers = ["POD", "CONTAINER", "ASSIGNED", "MEMORY BY NODE", "OUTSIDE", "CPUSET.MEMS"]
    print_table(
        [indent + headers[0], *headers[1:], "STATUS"],
        [
            [
                indent + pod_text(r),
                shown(r.container_name),
                format_cpulist(r.assigned_numa_nodes),
                _nodes_text(r),
                _outside_text(r),
                _cpuset_text(r),
                _STATUS.get(r.status, "unknown"),
            ]
            for r in rows
        ],
    )
    for r in rows:
        name = f"{pod_text(r)} {shown(r.container_name)}"
        if r.message:
            print(f"{indent}{name}: {guarded(r.message)}")
        if r.HasField("cpuset_write"):
            w = r.cpuset_write
            if w.error:
                print(
                    f"{indent}{name}: could not enforce cpuset.mems "
                    f"{format_cpulist(w.written)} in {shown(w.file)}: {guarded(w.error)}"
                )
            else:
                migrate = " (after setting cpuset.memory_migrate to 1)" * w.memory_migrate_enabled
                print(
                    f"{indent}{name}: wrote cpuset.mems {format_cpulist(w.written)} to "
                    f"{shown(w.file)}, was {format_cpulist(w.before) or '(empty)'}{migrate}"
                )
        if r.cpuset_enforcement in _ENFORCEMENT:
            print(
                f"{indent}{name}: --enforce-cpuset-mems holds back "
                f"({_ENFORCEMENT[r.cpuset_enforcement]}): {r.cpuset_enforcement_message}"
            )


def _as_json(r: mm.ContainerResidency) -> dict[str, Any]:
    """The message's fields (proto names), times as RFC 3339 strings (null when unset)."""
    data = message_to_dict(r)
    data["sampled_at"] = r.sampled_at.ToJsonString() if r.HasField("sampled_at") else None
    if r.HasField("cpuset_write"):
        data["cpuset_write"]["time"] = r.cpuset_write.time.ToJsonString()
    return data


def run(args: argparse.Namespace, client: NumamemClient) -> int:
    if args.container and not args.pod:
        raise UsageError("--container needs --pod")
    rows = client.get_residency(args.pod, args.container)
    if args.json:
        print_json({"containers": [_as_json(r) for r in rows]})
        return EXIT_OK
    if not rows:
        print("no container is pinned by the memory manager")
        return EXIT_OK
    print_residency(rows)
    times = sorted({r.sampled_at.ToJsonString() for r in rows if r.HasField("sampled_at")})
    if times:
        print(f"measured by the collector round of {times[-1]}")
    print(LEGEND)
    return EXIT_OK
