"""``numamem resize`` and ``numamem explain --resize``: in-place resize of pinned memory.

The pod comes from a manifest (``-f``), as the API server accepted the resize; ``--memory``
sets the container's memory request and limit in it first (``--container`` names the
container; the pod's only container when left out), ``--pod-memory`` the pod's
(``spec.resources``: a pod allocated by its pod-level resources is resized as a whole). A refusal (Deferred, Infeasible) is a
normal answer: its message on stdout and exit code 3, like a rejected ``admit``. A resize
that does nothing because the container is not pinned (RESIZE_NOT_PINNED) exits 1: the
request did nothing (a container already at that size, RESIZE_UNCHANGED, is a success).
A ``--container`` the manifest does not have, or none for a pod of several containers
without pod-level resources, is a usage error (exit 2); a manifest that cannot be read or
is not a valid Pod exits 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import grpc

from numamem.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REJECTED,
    UsageError,
    add_client_args,
    client_command,
    fail,
    guarded,
    human_bytes,
    message_to_dict,
    print_json,
    print_table,
    shown,
)
from numamem.cli.podfile import PodFileError, add_validate_argument, load_pod
from numamem.client import NumamemClient, error_reason
from numamem.errors import QuantityError, quote
from numamem.quantity import parse_quantity
from numamem.v1 import memorymanager_pb2

REFUSALS = {"RESIZE_DEFERRED": "Deferred", "RESIZE_INFEASIBLE": "Infeasible"}
_ACTIONS = {
    memorymanager_pb2.RESIZE_UNCHANGED: "unchanged (already that size; nothing written)",
    memorymanager_pb2.RESIZE_NOT_PINNED: "not pinned (the memory manager holds no memory for it)",
    memorymanager_pb2.RESIZE_GROWN_IN_GROUP: "grown in its NUMA group",
    memorymanager_pb2.RESIZE_GROWN_BY_EXTENSION: "grown by extending its NUMA group",
    memorymanager_pb2.RESIZE_SHRUNK: "shrunk (its NUMA group stays)",
    memorymanager_pb2.RESIZE_REPARTITIONED: (
        "repartitioned (the pod's budget stays; its containers' shares changed)"
    ),
}


def add_resize_args(parser: argparse.ArgumentParser) -> None:
    """``--container``, ``--memory`` and ``--pod-memory`` (``-f`` is the caller's)."""
    parser.add_argument(
        "--container",
        default="",
        help="the container (default: the only one; the pod itself when it sets spec.resources)",
    )
    parser.add_argument(
        "--memory",
        help="set the container's memory request and limit to this quantity (e.g. 6Gi) first",
    )
    parser.add_argument(
        "--pod-memory",
        help="set the pod's spec.resources memory request and limit (its budget) first",
    )


def add_parser(sub: Any) -> None:
    resize = sub.add_parser(
        "resize",
        help="resize a container's pinned memory in place (a numamem extension)",
        description=(
            "Resize the pinned memory of a container to its resources in the manifest (the pod as "
            "the API server accepted the resize), or to --memory. Exit code 3 when refused "
            "(Deferred: it fits once other pods free memory; Infeasible: not on this machine)."
        ),
    )
    resize.add_argument(
        "-f", "--file", required=True, help="Pod manifest (YAML or JSON; - for stdin)"
    )
    add_validate_argument(resize)
    add_resize_args(resize)
    add_client_args(resize)
    resize.set_defaults(run=client_command(run_resize))


def resized_pod(args: argparse.Namespace) -> tuple[memorymanager_pb2.Pod, str]:
    """The manifest's pod with ``--memory`` and ``--pod-memory`` applied, and the container's
    name ("" for a pod that sets pod-level resources and no ``--container``). Raises
    PodFileError for the manifest, UsageError for the flags."""
    pod = load_pod(args.file, args.validate)
    containers = [*pod.init_containers, *pod.containers]
    names = ", ".join(c.name for c in containers)
    name = args.container
    pod_level = any(
        k in ("cpu", "memory") or k.startswith("hugepages-") for k in (*pod.requests, *pod.limits)
    )  # the daemon's rule (IsPodLevelResourcesSet): no --container resizes the pod itself
    if not name and (args.memory is not None or not pod_level):
        if len(containers) != 1:
            raise UsageError(
                f"the pod has {len(containers)} containers ({names}); give --container"
            )
        name = containers[0].name
    found = [c for c in containers if c.name == name]
    if name and not found:
        raise UsageError(f"--container {quote(name)} is not in the pod (containers: {names})")
    if args.pod_memory is not None:
        _quantity("--pod-memory", args.pod_memory)
        pod.requests["memory"] = args.pod_memory
        pod.limits["memory"] = args.pod_memory
    if args.memory is not None:
        _quantity("--memory", args.memory)
        found[0].requests["memory"] = args.memory
        found[0].limits["memory"] = args.memory
    return pod, name


def _quantity(flag: str, text: str) -> None:
    try:
        parse_quantity(text)
    except QuantityError as err:
        raise UsageError(f"{flag} {quote(text)}: {err}") from err


def run_resize(args: argparse.Namespace, client: NumamemClient) -> int:
    try:
        pod, name = resized_pod(args)
    except PodFileError as err:
        return fail(str(err))
    try:
        resp = client.resize(pod, name)
    except grpc.RpcError as err:
        verdict = REFUSALS.get(error_reason(err) or "")
        if verdict is None:
            raise
        if args.json:
            print_json({"refusal": verdict, "message": err.details()})
        else:
            print(guarded(err.details() or verdict))
        return EXIT_REJECTED
    if args.json:
        print_json(message_to_dict(resp))
    else:
        print_resize(resp)
    return _exit_code(resp)


def _exit_code(resp: memorymanager_pb2.ResizeResponse) -> int:
    """1 when the resize did nothing because nothing is pinned (said on stderr), else 0."""
    if resp.action != memorymanager_pb2.RESIZE_NOT_PINNED:
        return EXIT_OK
    return fail(
        "nothing resized: the memory manager holds no memory for it (not admitted, released, "
        "or not pinned: `numamem explain -f FILE` says why)"
    )


def print_resize(resp: memorymanager_pb2.ResizeResponse) -> None:
    print(f"{_ACTIONS.get(resp.action, 'unknown')}")
    if resp.action == memorymanager_pb2.RESIZE_NOT_PINNED:
        return
    print(f"  memory: {human_bytes(resp.previous_memory)} -> {human_bytes(resp.memory)}")
    print(f"  blocks: {_blocks(resp.blocks)}")
    mems = _nodes(resp.numa_nodes)
    if resp.affinity_changed:
        print(f"  affinity changed: {_nodes(resp.previous_numa_nodes)} -> {mems}")
        moved = ", ".join(f"{shown(r.pod_uid)}/{shown(r.container_name)}" for r in resp.moved)
        print(f"  new cpuset.mems {mems} for: {moved}")
    else:
        print(f"  cpuset.mems: {mems} (unchanged)")
    if resp.pod_level:
        print(
            f"  pod budget (spec.resources): {human_bytes(resp.previous_pod_memory)} -> "
            f"{human_bytes(resp.pod_memory)}, pod-level blocks: {_blocks(resp.pod_blocks)}"
        )


def run_explain_resize(args: argparse.Namespace, client: NumamemClient) -> int:
    """Exits as ``resize`` would: 3 when it would be refused, 1 when it would do nothing
    because nothing is pinned, else 0."""
    try:
        pod, name = resized_pod(args)
    except PodFileError as err:
        return fail(str(err))
    resp = client.explain_resize(pod, name)
    if args.json:
        print_json(message_to_dict(resp))
        return EXIT_REJECTED if resp.refusal else _would(resp)
    print(f"topology manager: policy {resp.topology_manager_policy}")
    if resp.refusal:
        print(f"the resize would be refused: {guarded(resp.message)}")
    else:
        print("the resize would be:")
        print_resize(resp.decision)
    for note in resp.notes:
        print(f"  note: {guarded(note)}")
    if resp.candidates:
        rows = [
            ["  " + _nodes(c.numa_nodes), "yes" if c.taken else "no", c.reason]
            for c in resp.candidates
        ]
        print_table(["  SUPERSET", "TAKEN", "WHY"], rows)
    if resp.omitted_candidates:
        print(f"  ... and {resp.omitted_candidates} more supersets not listed")
    return EXIT_REJECTED if resp.refusal else _would(resp)


def _would(resp: memorymanager_pb2.ExplainResizeResponse) -> int:
    if resp.decision.action == memorymanager_pb2.RESIZE_NOT_PINNED:
        return EXIT_FAILED
    return EXIT_OK


def _nodes(nodes: Sequence[int]) -> str:
    return ",".join(map(str, nodes)) or "none"


def _blocks(blocks: Sequence[memorymanager_pb2.MemoryBlock]) -> str:
    text = ", ".join(f"{b.type} {human_bytes(b.size)} on {_nodes(b.numa_affinity)}" for b in blocks)
    return text or "none"
