"""Pod commands against the memory manager: ``hints``, ``explain``, ``admit``, ``release``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from numamem.cli.common import (
    EXIT_OK,
    EXIT_REJECTED,
    add_client_args,
    client_command,
    fail,
    human_bytes,
    message_to_dict,
    print_json,
    print_table,
)
from numamem.cli.podfile import PodFileError, load_pod
from numamem.client import NumamemClient
from numamem.v1 import memorymanager_pb2


def add_parsers(sub: Any) -> None:
    hints = sub.add_parser(
        "hints",
        help="show the memory manager's NUMA topology hints for a pod manifest",
        description="Container-scope hints for every container (or --container), or --pod-scope hints.",
    )
    _add_pod_file(hints)
    hints.add_argument("--container", help="only this container")
    hints.add_argument(
        "--pod-scope", action="store_true", help="pod-scope hints (GetPodTopologyHints)"
    )
    add_client_args(hints)
    hints.set_defaults(run=client_command(run_hints))

    explain = sub.add_parser(
        "explain",
        help="explain what admitting a pod manifest would decide, and why (changes nothing)",
        description=(
            "Run admission without allocating: the decision, each container's request, hints and merged "
            "hint, and for every NUMA mask why it was or was not offered. Exit code 3 when the pod would "
            "be rejected."
        ),
    )
    _add_pod_file(explain)
    add_client_args(explain)
    explain.set_defaults(run=client_command(run_explain))

    admit = sub.add_parser(
        "admit",
        help="admit a pod manifest (topology-manager admission, all-or-nothing)",
        description=(
            "Admit the pod and pin its containers' memory. Unless --no-start, then record each container as "
            "started (AddContainer) with the id <pod uid>/<container name>, in spec order, which frees the "
            "memory of init containers as the kubelet does. Exit code 3 when the pod is rejected."
        ),
    )
    _add_pod_file(admit)
    admit.add_argument(
        "--no-start", action="store_true", help="only admit; do not record containers as started"
    )
    add_client_args(admit)
    admit.set_defaults(run=client_command(run_admit))

    release = sub.add_parser(
        "release",
        help="release containers' memory by container id (RemoveContainer)",
        description="RemoveContainer for each id; an unknown id is not an error.",
    )
    release.add_argument("container_ids", nargs="+", metavar="CONTAINER_ID")
    add_client_args(release)
    release.set_defaults(run=client_command(run_release))


def _add_pod_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f", "--file", required=True, help="Pod manifest (YAML or JSON; - for stdin)"
    )


def _pod(args: argparse.Namespace) -> memorymanager_pb2.Pod | int:
    try:
        return load_pod(args.file)
    except PodFileError as err:
        return fail(str(err))


def _hint_text(h: memorymanager_pb2.TopologyHint) -> str:
    return _nodes_text(h.numa_nodes) + (" preferred" if h.preferred else "")


def run_hints(args: argparse.Namespace, client: NumamemClient) -> int:
    pod = _pod(args)
    if isinstance(pod, int):
        return pod
    if args.pod_scope:
        answers = {"(pod)": client.get_pod_topology_hints(pod)}
    else:
        names = [c.name for c in (*pod.init_containers, *pod.containers)]
        if args.container:
            if args.container not in names:
                return fail(
                    f"--container {args.container!r} is not in the pod (containers: {', '.join(names)})"
                )
            names = [args.container]
        answers = {name: client.get_topology_hints(pod, name) for name in names}
    if args.json:
        print_json({name: message_to_dict(resp)["hints"] for name, resp in answers.items()})
        return EXIT_OK
    rows = []
    for name, resp in answers.items():
        if not resp.hints:
            rows.append([name, "-", "no preference"])
        for resource in sorted(resp.hints):
            hints = resp.hints[resource].hints
            rows.append(
                [name, resource, "  ".join(_hint_text(h) for h in hints) or "none possible"]
            )
    print_table(["CONTAINER", "RESOURCE", "HINTS"], rows)
    return EXIT_OK


def run_admit(args: argparse.Namespace, client: NumamemClient) -> int:
    pod = _pod(args)
    if isinstance(pod, int):
        return pod
    resp = client.admit(pod)
    started: list[str] = []
    if resp.admitted and not args.no_start:
        for ctr in (*pod.init_containers, *pod.containers):
            cid = f"{pod.uid}/{ctr.name}"
            client.add_container(pod, ctr.name, cid)
            started.append(cid)
    if args.json:
        data = message_to_dict(resp)
        data["container_ids"] = started
        print_json(data)
    elif not resp.admitted:
        print(f"pod {pod.uid} rejected: {resp.reason}: {resp.message}")
    else:
        print(f"pod {pod.uid} admitted")
        rows = []
        for c in resp.containers:
            affinity = ",".join(map(str, c.affinity.numa_nodes)) or "any"
            blocks = ", ".join(
                f"{b.type} {human_bytes(b.size)} on {','.join(map(str, b.numa_affinity))}"
                for b in c.blocks
            )
            rows.append(
                [
                    c.container_name,
                    affinity + (" (preferred)" if c.affinity.preferred else ""),
                    blocks or "not pinned",
                ]
            )
        print_table(["CONTAINER", "AFFINITY", "BLOCKS"], rows)
        if started:
            print("container ids: " + " ".join(started))
            print("release with: numamem release <container id>...")
    return EXIT_OK if resp.admitted else EXIT_REJECTED


def run_release(args: argparse.Namespace, client: NumamemClient) -> int:
    for cid in args.container_ids:
        client.remove_container(cid)
        if not args.json:
            print(f"released {cid}")
    if args.json:
        print_json({"released": args.container_ids})
    return EXIT_OK


def _nodes_text(nodes: Sequence[int]) -> str:
    return "{" + (",".join(map(str, nodes)) or "any") + "}"


def run_explain(args: argparse.Namespace, client: NumamemClient) -> int:
    pod = _pod(args)
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
        print(f"pod {pod.uid} would be admitted")
    else:
        print(f"pod {pod.uid} would be rejected: {decision.reason}: {decision.message}")
    if not resp.containers:
        print("nothing to explain: no container reached hinting or allocation")
    for ctr in resp.containers:
        print()
        print(f"{ctr.container_name or '(pod)'}: {'ok' if ctr.admitted else 'NOT ADMITTED'}")
        requested = ", ".join(f"{k} {human_bytes(v)}" for k, v in sorted(ctr.requested.items()))
        print(f"  requested: {requested or 'nothing pinned'}")
        if ctr.note:
            print(f"  note: {ctr.note}")
        if ctr.masks and not ctr.hints:
            print("  hints: none, no mask qualifies (the memory manager then states no preference)")
        for resource in sorted(ctr.hints):
            hints = ctr.hints[resource].hints
            print(
                f"  hints {resource}: {'  '.join(_hint_text(h) for h in hints) or 'none possible'}"
            )
        if ctr.omitted_hints:
            print(f"  ({ctr.omitted_hints} more hints not listed)")
        if ctr.hints or ctr.merged.numa_nodes:
            print(f"  merged: {_hint_text(ctr.merged)}")
        else:
            print("  affinity: none given; the memory manager picks its own best hint")
        if ctr.masks:
            rows = [
                [
                    "  " + _nodes_text(m.numa_nodes),
                    ("preferred" if m.preferred else "offered") if m.offered else "no",
                    m.reason,
                ]
                for m in ctr.masks
            ]
            print_table(["  MASK", "OFFERED", "WHY NOT"], rows)
        if ctr.omitted_masks:
            print(f"  ... and {ctr.omitted_masks} larger masks not listed")
    return EXIT_OK if decision.admitted else EXIT_REJECTED
