"""Where a call's time goes: cProfile of one servicer method, in process, state on tmpfs.

``python -m bench.profile allocate`` (or ``admit``, ``nri-admit``: one container with its id,
as ``numamem nri`` sends it, ``add``, ``remove``, ``metacache``)
starts the servicers in this process (the daemon's components, as ``serve`` builds them,
state directory on ``/dev/shm`` so the disk does not hide numamem's own work), warms up,
then profiles ``--calls`` calls of that method alone (the untimed calls that undo it run
outside the profile) and prints the top ``--top`` entries by own time, then by
cumulative time. The gRPC transport is not in the profile: a servicer method's time is
what numamem adds to the RPC floor. ``--pods N`` admits N 3-container pods first, for the
cost at a given state size; ``--names`` turns on ``--podresources-socket`` (pod names kept
beside the state).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import grpc

from numamem import logging as nlog
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.testing.server import serve_in_process
from numamem.testing.sysfs import standard_nodes
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc

TMPFS = Path("/dev/shm")
OPERATIONS = ("allocate", "admit", "nri-admit", "add", "remove", "metacache")


class _Context:
    """The part of grpc.ServicerContext the servicers read on success."""

    def time_remaining(self) -> float:
        return 30.0


CONTEXT = cast(grpc.ServicerContext, _Context())


def _pod(uid: str, containers: int = 1) -> mm.Pod:
    res = {"cpu": "1", "memory": "100Mi"}
    return mm.Pod(
        uid=uid, namespace="bench", name=uid,
        containers=[mm.Container(name=f"c{i}", requests=res, limits=res) for i in range(containers)],
    )  # fmt: skip


def _steps(
    op: str, sv: Any, writer: Any, first: int
) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """(the profiled call, the untimed call that undoes it) for iteration ``i``, the first
    iteration being ``first``."""
    ctx = CONTEXT
    p0 = _pod("p0")
    if op == "allocate":
        return (
            lambda i: sv.Allocate(mm.AllocateRequest(pod=p0, container_name="c0"), ctx),
            lambda i: sv.ReleasePod(mm.ReleasePodRequest(pod_uid="p0"), ctx),
        )
    if op == "admit":
        return (
            lambda i: sv.Admit(mm.AdmitRequest(pod=_pod(f"a{i}", 3)), ctx),
            lambda i: sv.ReleasePod(mm.ReleasePodRequest(pod_uid=f"a{i}"), ctx),
        )
    if op == "nri-admit":  # what numamem nri sends at CreateContainer
        return (
            lambda i: sv.Admit(
                mm.AdmitRequest(pod=_pod(f"a{i}", 1), container_ids={"c0": f"id-{i}"}), ctx
            ),
            lambda i: sv.ReleasePod(mm.ReleasePodRequest(pod_uid=f"a{i}"), ctx),
        )
    if op in ("add", "remove"):
        add = lambda i: sv.AddContainer(  # noqa: E731
            mm.AddContainerRequest(pod=p0, container_name="c0", container_id=f"id{i}"), ctx
        )
        remove = lambda i: sv.RemoveContainer(  # noqa: E731
            mm.RemoveContainerRequest(container_id=f"id{i}"), ctx
        )
        allocate = lambda: sv.Allocate(mm.AllocateRequest(pod=p0, container_name="c0"), ctx)  # noqa: E731
        if op == "add":  # AddContainer of an allocated container; RemoveContainer frees it
            allocate()
            return add, lambda i: (remove(i), allocate())
        allocate()  # RemoveContainer of a running container (its memory freed)
        add(first)
        return remove, lambda i: (allocate(), add(i + 1))
    info = lambda i: mc.AddContainerInfoRequest(  # noqa: E731
        pod_uid=f"m{i % 50}",
        container_name="c0",
        info=mc.ContainerInfo(pod_uid=f"m{i % 50}", container_name="c0", cpu_request=1.0 + i % 7),
    )
    return lambda i: writer.AddContainer(info(i), ctx), lambda i: None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("operation", choices=OPERATIONS)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=200, help="unprofiled calls first")
    parser.add_argument("--pods", type=int, default=0, help="3-container pods admitted first")
    parser.add_argument("--names", action="store_true", help="with --podresources-socket")
    parser.add_argument("--state-commit", default="replace", choices=("replace", "journal"))
    parser.add_argument("--nodes", type=int, default=2, help="NUMA nodes of the fake machine")
    parser.add_argument(
        "--topology-manager-policy",
        default="none",
        help="e.g. restricted (max-allowable-numa-nodes is raised to --nodes)",
    )
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="nmprof-", dir=TMPFS if TMPFS.is_dir() else None))
    config: dict[str, Any] = {"podresources_socket": str(root / "pr.sock")} if args.names else {}
    config["state_commit"] = args.state_commit
    if args.topology_manager_policy != "none":
        config["topology_manager_policy"] = args.topology_manager_policy
        config["topology_manager_policy_options"] = (
            ("max-allowable-numa-nodes", str(max(8, args.nodes))),
        )
    try:
        with serve_in_process(
            nodes=standard_nodes(args.nodes, memory_gib=max(16, args.pods)), root=root, **config
        ) as server:
            components = server.daemon._components
            sv = next(c for c in components if isinstance(c, MemoryManagerComponent)).servicer
            writer = next(c for c in components if isinstance(c, MetaCacheComponent)).writer
            for i in range(args.pods):
                sv.Admit(mm.AdmitRequest(pod=_pod(f"fill{i}", 3)), CONTEXT)
            call, undo = _steps(args.operation, sv, writer, first=-args.warmup)
            for i in range(-args.warmup, 0):
                call(i)
                undo(i)
            profile = cProfile.Profile()
            spent = 0.0
            for i in range(args.calls):
                t0 = time.perf_counter()
                profile.enable()
                call(i)
                profile.disable()
                spent += time.perf_counter() - t0
                undo(i)
            print(
                f"{args.operation}: {args.calls} calls, {spent / args.calls * 1e6:.0f} us each "
                f"under the profiler ({args.pods} pods, names {'on' if args.names else 'off'})"
            )
            stats = pstats.Stats(profile)
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    # Logging as the daemon's default level: only here, so that main() called from a test
    # leaves the test session's logging (and its captured streams) alone.
    nlog.configure("warning", "console", cache=False)
    sys.exit(main(sys.argv[1:]))
