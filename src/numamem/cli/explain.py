"""``numamem explain``: what admitting a pod manifest would decide, and why (changes nothing);
``explain --resize``: what a resize would (:mod:`numamem.cli.resize`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from numamem.cli.common import (
    EXIT_OK,
    EXIT_REJECTED,
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
from numamem.cli.memory import (
    add_pod_file,
    hint_text,
    nodes_text,
    pod_from_args,
    print_not_pinned,
)
from numamem.cli.resize import add_resize_args, run_explain_resize
from numamem.client import NumamemClient
from numamem.v1 import memorymanager_pb2


def add_parser(sub: Any) -> None:
    explain = sub.add_parser(
        "explain",
        help="explain what admitting a pod manifest would decide, and why (changes nothing)",
        description=(
            "Run admission without allocating: the decision, each container's request, hints and merged "
            "hint, and for every NUMA mask why it was or was not offered. Exit code 3 when the pod would "
            "be rejected."
        ),
    )
    add_pod_file(explain)
    explain.add_argument(
        "--resize",
        action="store_true",
        help="explain an in-place resize of a pinned container to the manifest's resources instead",
    )
    add_resize_args(explain)
    add_client_args(explain)
    explain.set_defaults(run=client_command(run_explain))


def _sizes_text(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{shown(k)} {human_bytes(v)}" for k, v in sorted(sizes.items())) or "nothing"


def _print_pod_level(plan: memorymanager_pb2.PodLevelExplanation) -> None:
    """How the pod's pod-level budget divides (KEP-5526)."""
    print(f"pod-level budget: {_sizes_text(plan.budget)}")
    exclusive = ", ".join(
        f"{shown(c.container_name)} ({_sizes_text(c.requested)})" for c in plan.exclusive
    )
    print(f"  memory of their own: {exclusive or 'none'}")
    print(f"  sharing: {', '.join(map(shown, plan.shared)) or 'none'}")
    print(f"  shared pool: {_sizes_text(plan.pool)}")
    if plan.rejection:
        print(f"  refused: {guarded(plan.rejection)} (EmptyPodSharedPoolError)")


def run_explain(args: argparse.Namespace, client: NumamemClient) -> int:
    if args.resize:
        return run_explain_resize(args, client)
    if args.container or args.memory is not None:
        raise UsageError("--container and --memory go with --resize")
    pod = pod_from_args(args)
    if isinstance(pod, int):
        return pod
    resp = client.explain(pod)
    decision = resp.decision
    if args.json:
        print_json(message_to_dict(resp))
        return EXIT_OK if decision.admitted else EXIT_REJECTED
    print(
        f"topology manager: policy {resp.topology_manager_policy}, "
        f"scope {resp.topology_manager_scope}"
    )
    if decision.admitted:
        print(f"pod {shown(pod.uid)} would be admitted")
        print_not_pinned(decision.containers, indent="  ")
    else:
        print(
            f"pod {shown(pod.uid)} would be rejected: {guarded(decision.reason)}: "
            f"{guarded(decision.message)}"
        )
    if resp.HasField("pod_level"):
        _print_pod_level(resp.pod_level)
    if not resp.containers:
        print("nothing to explain: no container reached hinting or allocation")
    for ctr in resp.containers:
        print()
        name = shown(ctr.container_name) if ctr.container_name else "(pod)"
        print(f"{name}: {'ok' if ctr.admitted else 'NOT ADMITTED'}")
        requested = ", ".join(
            f"{shown(k)} {human_bytes(v)}" for k, v in sorted(ctr.requested.items())
        )
        print(f"  requested: {requested or 'nothing pinned'}")
        if ctr.note:
            print(f"  note: {guarded(ctr.note)}")
        if ctr.masks and not ctr.hints:
            print("  hints: none, no mask qualifies (the memory manager then states no preference)")
        for resource in sorted(ctr.hints):
            hints = ctr.hints[resource].hints
            print(
                f"  hints {shown(resource)}: "
                f"{'  '.join(hint_text(h) for h in hints) or 'none possible'}"
            )
        if ctr.omitted_hints:
            print(f"  ({ctr.omitted_hints} more hints not listed)")
        if ctr.hints or ctr.merged.numa_nodes:
            print(f"  merged: {hint_text(ctr.merged)}")
        else:
            print("  affinity: none given; the memory manager picks its own best hint")
        if ctr.masks:
            rows = [
                [
                    "  " + nodes_text(m.numa_nodes),
                    ("preferred" if m.preferred else "offered") if m.offered else "no",
                    m.reason,
                ]
                for m in ctr.masks
            ]
            print_table(["  MASK", "OFFERED", "WHY NOT"], rows)
        if ctr.omitted_masks:
            print(f"  ... and {ctr.omitted_masks} larger masks not listed")
    if resp.residency:
        from numamem.cli.residency import print_residency

        print()
        print("residency of the pod's pinned containers (the last collector round):")
        print_residency(resp.residency, indent="  ")
    return EXIT_OK if decision.admitted else EXIT_REJECTED
