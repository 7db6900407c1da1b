"""Pod commands against the memory manager: ``hints``, ``admit``, ``release``, ``sync``
(``explain``: :mod:`numamem.cli.explain`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
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
from numamem.cli.podfile import PodFileError, add_validate_argument, load_pod, load_pods
from numamem.client import NumamemClient
from numamem.errors import quote
from numamem.v1 import memorymanager_pb2


def add_hints_parser(sub: Any) -> None:
    hints = sub.add_parser(
        "hints",
        help="show the memory manager's NUMA topology hints for a pod manifest",
        description="Container-scope hints for every container (or --container), or --pod-scope hints.",
    )
    add_pod_file(hints)
    hints.add_argument("--container", help="only this container")
    hints.add_argument(
        "--pod-scope", action="store_true", help="pod-scope hints (GetPodTopologyHints)"
    )
    add_client_args(hints)
    hints.set_defaults(run=client_command(run_hints))


def add_admit_parser(sub: Any) -> None:
    admit = sub.add_parser(
        "admit",
        help="admit a pod manifest (topology-manager admission, all-or-nothing)",
        description=(
            "Admit the pod and pin its containers' memory. Unless --no-start, record each container as "
            "started (as AddContainer would, in the admission's write) with its runtime id (--container-id), else the id <pod uid>/<container "
            "name>, in spec order, which frees the memory of init containers as the kubelet does. Exit code "
            "3 when the pod is rejected."
        ),
    )
    add_pod_file(admit)
    admit.add_argument(
        "--no-start", action="store_true", help="only admit; do not record containers as started"
    )
    admit.add_argument(
        "--container-id",
        action="append",
        default=[],
        type=name_and_id,
        metavar="NAME=ID",
        help="record container NAME as started with the runtime's id ID (e.g. "
        "containerd://<64 hex>, as kubectl get pod -o yaml shows in status.containerStatuses), "
        "so that residency and the container metrics find its cgroup (repeatable; the others "
        "get <pod uid>/<name>, which names no cgroup)",
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
    add_validate_argument(sync)
    add_client_args(sync)
    sync.set_defaults(run=client_command(run_sync))


def add_pod_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f", "--file", required=True, help="Pod manifest (YAML or JSON; - for stdin)"
    )
    add_validate_argument(parser)


def pod_from_args(args: argparse.Namespace) -> memorymanager_pb2.Pod | int:
    try:
        return load_pod(args.file, args.validate)
    except PodFileError as err:
        return fail(str(err))


def hint_text(h: memorymanager_pb2.TopologyHint) -> str:
    return nodes_text(h.numa_nodes) + (" preferred" if h.preferred else "")


def run_hints(args: argparse.Namespace, client: NumamemClient) -> int:
    pod = pod_from_args(args)
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
            rows.append([name, resource, "  ".join(hint_text(h) for h in hints) or "none possible"])
    print_table(["CONTAINER", "RESOURCE", "HINTS"], rows)
    return EXIT_OK


def name_and_id(text: str) -> tuple[str, str]:
    """``--container-id NAME=ID``: a container's name and its runtime id, both non-empty."""
    name, sep, cid = text.partition("=")
    if not sep or not name or not cid:
        raise argparse.ArgumentTypeError(
            f"{quote(text)}: expected NAME=ID, a container of the manifest and its runtime id "
            "(e.g. app=containerd://4f2a...)"
        )
    return name, cid


def given_ids(args: argparse.Namespace, pod: memorymanager_pb2.Pod) -> dict[str, str]:
    """``--container-id`` as container name -> id, checked against the pod before anything is
    admitted: a name the manifest does not have, a name or an id given twice, or ids with
    --no-start are usage errors."""
    if args.container_id and args.no_start:
        raise UsageError("--container-id records started containers; --no-start records none")
    names = [c.name for c in (*pod.init_containers, *pod.containers)]
    ids: dict[str, str] = {}
    for name, cid in args.container_id:
        if name not in names:
            raise UsageError(
                f"--container-id {quote(name)}=...: no such container in the pod (containers: "
                f"{', '.join(names)})"
            )
        if name in ids:
            raise UsageError(f"--container-id {quote(name)}=... is given twice")
        if cid in ids.values():
            raise UsageError(f"--container-id ...={quote(cid)} names two containers")
        ids[name] = cid
    return ids


def run_admit(args: argparse.Namespace, client: NumamemClient) -> int:
    pod = pod_from_args(args)
    if isinstance(pod, int):
        return pod
    given = given_ids(args, pod)
    every = (*pod.init_containers, *pod.containers)
    ids = {c.name: given.get(c.name, f"{pod.uid}/{c.name}") for c in every}
    # Started: each id recorded (AddContainer's work) in the admission's one write.
    resp = client.admit(pod, container_ids=None if args.no_start else ids)
    started: list[str] = []
    if resp.admitted and not args.no_start:
        for ctr in every:
            if not resp.container_ids_recorded:  # a daemon older than Admit's container_ids
                client.add_container(pod, ctr.name, ids[ctr.name])
            if ctr in pod.containers or ctr.restart_policy == "Always":
                # A regular init container's memory goes when the app starts; its id with it.
                started.append(ids[ctr.name])
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
                    blocks or f"not pinned: {c.not_pinned_reason or 'unknown'}",
                ]
            )
        print_table(["CONTAINER", "AFFINITY", "BLOCKS"], rows)
        print_not_pinned(resp.containers)
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


def print_not_pinned(
    containers: Sequence[memorymanager_pb2.ContainerAdmission], indent: str = ""
) -> None:
    """One line per admitted container the memory manager did not pin: the daemon's reason
    (a stable code) and message."""
    for c in containers:
        if not c.blocks:
            print(
                f"{indent}{shown(c.container_name)}: not pinned "
                f"({c.not_pinned_reason or 'unknown'}): {guarded(c.not_pinned_message)}"
            )


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
            listed = load_pods(path, args.validate)
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


def nodes_text(nodes: Sequence[int]) -> str:
    return "{" + (",".join(map(str, nodes)) or "any") + "}"


def _blocks_text(blocks: Sequence[memorymanager_pb2.MemoryBlock]) -> str:
    return ", ".join(
        f"{b.type} {human_bytes(b.size)} on {','.join(map(str, b.numa_affinity))}" for b in blocks
    )
