"""Pod commands against the memory manager: ``hints``, ``explain``, ``admit``, ``release``, ``sync``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

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
    plural,
    print_json,
    print_table,
    shown,
)
from numamem.cli.podfile import PodFileError, load_pod, load_pods
from numamem.cli.resize import add_resize_args, run_explain_resize
from numamem.client import NumamemClient
from numamem.errors import quote
from numamem.v1 import memorymanager_pb2


def add_hints_parser(sub: Any) -> None:
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


def add_explain_parser(sub: Any) -> None:
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
    explain.add_argument(
        "--resize",
        action="store_true",
        help="explain an in-place resize of a pinned container to the manifest's resources instead",
    )
    add_resize_args(explain)
    add_client_args(explain)
    explain.set_defaults(run=client_command(run_explain))


def add_admit_parser(sub: Any) -> None:
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


def add_release_parser(sub: Any) -> None:
    release = sub.add_parser(
        "release",
        help="release memory by container id (RemoveContainer) or a whole pod (--pod)",
        description=(
            "RemoveContainer for each container id, or ReleasePod for --pod UID (every container "
            "of the pod, whether or not its ids were recorded). Exit code 1 when an id is not "
            "known or the pod holds no memory (nothing was released for it)."
        ),
    )
    release.add_argument("container_ids", nargs="*", metavar="CONTAINER_ID")
    release.add_argument("--pod", metavar="UID", help="release every container of this pod")
    add_client_args(release)
    release.set_defaults(run=client_command(run_release))


def add_sync_parser(sub: Any) -> None:
    sync = sub.add_parser(
        "sync",
        help="declare the live pods (SyncActivePods): release every container not in them",
        description=(
            "SyncActivePods with the pods of the given manifests (a Pod, a 'kind: List' such as "
            "'kubectl get pods -o yaml' prints, or several YAML documents): the memory of every "
            "other container is released. Releasing everything takes --none."
        ),
    )
    sync.add_argument(
        "-f", "--file", action="append", default=[], help="manifest file (repeatable; - for stdin)"
    )
    sync.add_argument("--none", action="store_true", help="no pod is live: release everything")
    add_client_args(sync)
    sync.set_defaults(run=client_command(run_sync))


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
        if args.container:
            raise UsageError("--container and --pod-scope: pod-scope hints are the whole pod's")
        answers = {"(pod)": client.get_pod_topology_hints(pod)}
    else:
        names = [c.name for c in (*pod.init_containers, *pod.containers)]
        if args.container:
            if args.container not in names:
                raise UsageError(
                    f"--container {quote(args.container)} is not in the pod (containers: {', '.join(names)})"
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
            if ctr in pod.containers or ctr.restart_policy == "Always":
                # A regular init container's memory goes when the app starts; its id with it.
                started.append(cid)
    if args.json:
        data = message_to_dict(resp)
        data["container_ids"] = started
        print_json(data)
    elif not resp.admitted:
        print(f"pod {shown(pod.uid)} rejected: {guarded(resp.reason)}: {guarded(resp.message)}")
    else:
        print(f"pod {shown(pod.uid)} admitted")
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
        if resp.pod_blocks:
            print(f"pod-level allocation (the pod's budget): {_blocks_text(resp.pod_blocks)}")
        if started:
            print("container ids: " + " ".join(map(shown, started)))
            print("release with: numamem release <container id>...")
        else:
            print("containers not started (--no-start): their memory stays pinned until")
            print(
                "AddContainer records them, or release the pod with: numamem release --pod "
                + shown(pod.uid)
            )
    return EXIT_OK if resp.admitted else EXIT_REJECTED


def run_release(args: argparse.Namespace, client: NumamemClient) -> int:
    if bool(args.pod) == bool(args.container_ids):
        raise UsageError("give container ids, or --pod UID (not both)")
    released: list[str] = []
    unknown: list[str] = []
    if args.pod:
        refs = client.release_pod(args.pod)
        released = [f"{r.pod_uid}/{r.container_name}" for r in refs]
        if not refs:
            unknown.append(args.pod)
    else:
        for cid in args.container_ids:
            (released if client.remove_container(cid) else unknown).append(cid)
    if args.json:
        print_json({"released": released, "not_found": unknown})
    else:
        for name in released:
            print(f"released {shown(name)}")
        for name in unknown:
            what = (
                f"pod {quote(name)} holds no memory"
                if args.pod
                else f"container id {quote(name)} is not known"
            )
            print(f"numamem: {what}; nothing released", file=sys.stderr)
    return EXIT_FAILED if unknown else EXIT_OK


def run_sync(args: argparse.Namespace, client: NumamemClient) -> int:
    """SyncActivePods. Releasing everything always takes ``--none``: input without pods (an
    empty file, the empty ``kind: List`` kubectl prints for a wrong namespace or context) is
    refused without it, any one file of them too (``-f ns1.yaml -f ns2.yaml`` with an empty
    ``ns2.yaml`` would release ns2's pods), and ``--none`` is refused beside input that
    lists pods."""
    if not args.file and not args.none:
        raise UsageError("give the live pods with -f FILE, or --none to release everything")
    by_uid: dict[str, memorymanager_pb2.Pod] = {}  # a pod in several files counts once
    empty: list[str] = []
    for path in args.file:
        try:
            listed = load_pods(path)
        except PodFileError as err:
            return fail(str(err))
        if not listed:
            empty.append(path)
        by_uid.update((p.uid, p) for p in listed)
    pods = list(by_uid.values())
    if pods and args.none:
        raise UsageError(f"--none, but {plural(len(pods), 'live pod')} in {', '.join(args.file)}")
    if empty and not args.none:
        others = (
            f"; the other files list {plural(len(pods), 'live pod')}, and every pod this "
            "input leaves out is released"
            if pods
            else ""
        )
        return fail(
            f"sync: {', '.join(empty)}: no pods (an empty file, or an empty 'kind: List' as "
            f"kubectl prints for a wrong namespace or context){others}; nothing released. "
            "Leave out a file whose namespace has no live pod; if no pod is live at all, "
            "release everything with --none"
        )
    removed = client.sync_active_pods(pods)
    if args.json:
        print_json(
            {"live_pods": [p.uid for p in pods], "released": [message_to_dict(r) for r in removed]}
        )
        return EXIT_OK
    print(f"{plural(len(pods), 'live pod')}; released {plural(len(removed), 'container')}")
    for ref in removed:
        print(f"released {shown(ref.pod_uid)}/{shown(ref.container_name)}")
    return EXIT_OK


def _nodes_text(nodes: Sequence[int]) -> str:
    return "{" + (",".join(map(str, nodes)) or "any") + "}"


def _blocks_text(blocks: Sequence[memorymanager_pb2.MemoryBlock]) -> str:
    return ", ".join(
        f"{b.type} {human_bytes(b.size)} on {','.join(map(str, b.numa_affinity))}" for b in blocks
    )


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
        print(f"pod {shown(pod.uid)} would be admitted")
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
                f"{'  '.join(_hint_text(h) for h in hints) or 'none possible'}"
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
    if resp.residency:
        from numamem.cli.residency import print_residency

        print()
        print("residency of the pod's pinned containers (the last collector round):")
        print_residency(resp.residency, indent="  ")
    return EXIT_OK if decision.admitted else EXIT_REJECTED
