"""The memory manager over gRPC (``make bench`` phases ``memory``, ``hints``, ``numa``,
``podresources``): the durable Allocate / AddContainer / RemoveContainer lifecycle and Admit
against the write floor, GetTopologyHints by NUMA node count, Admit on 2 and 16 nodes with
its bounds, and Admit with pod names kept beside podresources List as pods grow.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bench.harness import (
    GI,
    Daemon,
    Report,
    Scale,
    daemon,
    guaranteed,
    latencies,
    pct,
    throughput,
)
from numamem.api.convert import hints_to_proto
from numamem.checkpoint.filestore import atomic_write
from numamem.client import NumamemClient
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.model import MemoryState
from numamem.pod import Container, Pod
from numamem.quantity import parse_quantity
from numamem.topology.machine import HugePagePool, Machine, NUMANode
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import podresources_pb2 as pr
from numamem.v1 import podresources_pb2_grpc as pr_grpc


def memory_manager_phase(r: Report, d: Daemon, s: Scale) -> None:
    print(
        "memory manager: Allocate + AddContainer + RemoveContainer, Admit (2-node machine)",
        flush=True,
    )
    client = NumamemClient(d.socket, timeout=10)
    alloc: list[float] = []
    add: list[float] = []
    remove: list[float] = []
    pair: list[float] = []

    def lifecycle(i: int) -> None:
        pod = guaranteed(f"lc-{i}")
        t0 = time.perf_counter()
        client.allocate(pod, "c0")
        t1 = time.perf_counter()
        client.add_container(pod, "c0", f"id-lc-{i}")
        t2 = time.perf_counter()
        client.remove_container(f"id-lc-{i}")
        t3 = time.perf_counter()
        if i >= 0:
            alloc.append(t1 - t0)
            add.append(t2 - t1)
            remove.append(t3 - t2)
            pair.append((t1 - t0) + (t3 - t2))

    # The second floor of a durable RPC: one atomic checkpoint write (temp file, fsync, rename,
    # fsync of the directory) of a state-sized file, on the daemon's file system.
    sample = (Path(d.state_dir) / "memory_manager_state").read_bytes()
    target = d.root / "write-floor" / "memory_manager_state"
    target.parent.mkdir()
    writes = latencies(lambda _i: atomic_write(target, sample), s.latency_n // 2, s.warmup // 2)
    r.latency("write_floor", "write floor: one atomic durable write", writes)
    latencies(lifecycle, s.latency_n, s.warmup)
    r.latency("allocate", "Allocate (1 container, durable)", alloc)
    r.latency("add_container", "AddContainer (durable)", add)
    r.latency("remove_container", "RemoveContainer (durable)", remove)
    r.latency("allocate_remove_pair", "Allocate + RemoveContainer pair", pair)
    # Allocate writes memory_manager_state once; RemoveContainer writes it and then the
    # container-id map (ordered, so a crash between them cannot lose a release).
    floor_pair = 2 * r.floor_p50 + 3 * pct(writes, 0.5)
    r.value(
        "allocate_remove_pair_vs_durable_floor",
        "  pair p50 / (2 RPC floors + 3 write floors)",
        pct(pair, 0.5) / floor_pair,
        "",
    )

    def lifecycle_worker(t: int) -> Callable[[int], int]:
        c = NumamemClient(d.socket, timeout=10)

        def work(i: int) -> int:
            pod = guaranteed(f"lc-{t}-{i}")
            c.allocate(pod, "c0")
            c.add_container(pod, "c0", f"id-{t}-{i}")
            c.remove_container(f"id-{t}-{i}")
            return 1

        return work

    ops = throughput(lifecycle_worker, 8, s.seconds)
    r.value(
        "allocate_remove_throughput_8",
        "Allocate+Add+Remove lifecycles, 8 threads",
        ops,
        "lifecycles/s",
    )

    admitted = 0

    def admit(i: int) -> None:
        nonlocal admitted
        resp = client.admit(guaranteed(f"ad-{i}", containers=3))
        assert resp.admitted, resp.message
        admitted += 1
        if admitted % 50 == 0:  # keep the machine from filling up (not timed in the next call)
            client.sync_active_pods([])

    samples = []
    for i in range(-s.warmup, s.latency_n):
        t = time.perf_counter()
        admit(i)
        dt = time.perf_counter() - t
        if i >= 0 and admitted % 50 != 0:
            samples.append(dt)
    r.latency("admit", "Admit, 3-container Guaranteed pod", samples)
    r.value(
        "admit_vs_durable_floor",
        "  Admit p50 / (RPC floor + write floor)",
        pct(samples, 0.5) / (r.floor_p50 + pct(writes, 0.5)),
        "",
    )
    client.sync_active_pods([])

    lock = threading.Lock()
    total = [0]

    def admit_worker(t: int) -> Callable[[int], int]:
        c = NumamemClient(d.socket, timeout=10)

        def work(i: int) -> int:
            c.admit(guaranteed(f"ad-{t}-{i}", containers=3))
            with lock:
                total[0] += 1
                sync = total[0] % 50 == 0
            if sync:
                c.sync_active_pods([])
            return 1

        return work

    ops = throughput(admit_worker, 8, s.seconds)
    r.value("admit_throughput_8", "Admit throughput, 8 threads (a sync per 50)", ops, "pods/s")
    writes = d.metric(
        'numamem_checkpoint_write_duration_seconds_count{file="memory_manager_state"}'
    )
    r.figures["memory_manager_state_writes"] = writes
    client.close()


def hint_phase(r: Report, root: Path, s: Scale) -> None:
    print("GetTopologyHints by NUMA node count (in-process with the response, and over gRPC)")
    q = parse_quantity
    res = {"cpu": q("1"), "memory": q("1Gi"), "hugepages-2Mi": q("2Mi")}
    pod = Pod("hints", containers=(Container("c", res, dict(res)),))
    for n in (1, 2, 4, 8, 16):
        machine = Machine(
            tuple(
                NUMANode(i, 64 * GI, (HugePagePool(2048, 512, 512), HugePagePool(1048576, 4, 4)))
                for i in range(n)
            )
        )
        policy = StaticPolicy(machine, {0: {"memory": GI}})
        state = MemoryState(policy.default_machine_state(), {})
        samples = latencies(
            lambda _i, p=policy, st=state: hints_to_proto(
                p.get_topology_hints(st, pod, pod.containers[0]), 4096
            ),
            s.hints_n,
            2,
        )
        r.latency(f"hints_inprocess_{n}", f"GetTopologyHints in-process, {n} nodes", samples)
    for n in (1, 2, 4, 8, 16):
        with daemon(root / f"hints-{n}", nodes=n, memory_gib=64) as d:
            client = NumamemClient(d.socket, timeout=30)
            wire = mm.Pod(
                uid="hints",
                containers=[mm.Container(name="c", requests={"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi"},
                                         limits={"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi"})],
            )  # fmt: skip
            samples = latencies(
                lambda _i, c=client, w=wire: c.get_topology_hints(w, "c"), s.hints_n, 2
            )
            r.latency(f"hints_grpc_{n}", f"GetTopologyHints over gRPC, {n} nodes", samples)
            client.close()


def numa_grpc_phase(r: Report, root: Path, s: Scale) -> None:
    """Admit over gRPC on 2 and 16 nodes, restricted policy, a few pods pinned, the durable
    write floor of the 16-node state (Admit's one write), and the 16-node Admit's bounds
    (:mod:`bench.bounds`: replayed with only its write, and with nothing)."""
    figures: dict[tuple[int, str | None], float] = {}
    # Bounds: the pins and the loop's first Admit are real, so the replayed write is the
    # state a timed Admit writes (the pinned pods and its own).
    pins = 3
    for n, bound in ((2, None), (16, None), (16, "write"), (16, "noop")):
        options = f"--topology-manager-policy-options=max-allowable-numa-nodes={max(n, 8)}"
        extra = ["--topology-manager-policy=restricted", options]
        tag = f"numa-{n}" + (f"-{bound}" if bound else "")
        with daemon(
            root / tag, nodes=n, memory_gib=64, extra=extra, bound=bound, real_admits=pins + 1
        ) as d:
            client = NumamemClient(d.socket, timeout=30)
            for i in range(pins):
                assert client.admit(guaranteed(f"pin-{i}", containers=3, memory="2Gi")).admitted
            samples = []
            for i in range(-s.warmup // 4, s.latency_n // 4):
                pod = guaranteed(f"n{n}-{i}", containers=3, memory="2Gi")
                t = time.perf_counter()
                resp = client.admit(pod)
                dt = time.perf_counter() - t
                assert resp.admitted, resp.message
                client.release_pod(pod.uid)
                if i >= 0:
                    samples.append(dt)
            client.close()
            figures[n, bound] = pct(samples, 0.5)
            if bound is not None:
                r.value(
                    f"numa_admit_grpc_16_bound_{bound}",
                    f"  bound: Admit 16 nodes replayed, {'only its atomic write' if bound == 'write' else 'no write'} (bench.bounds), / floor",
                    figures[n, bound] / r.floor_p50,
                    "x",
                    "(no numamem work: a target below this cannot be met here)" if bound == "write" else "",
                )  # fmt: skip
                continue
            r.latency(
                f"numa_admit_grpc_{n}", f"Admit over gRPC, {n} nodes, restricted (durable)", samples
            )
            if n == 16:
                sample = (Path(d.state_dir) / "memory_manager_state").read_bytes()
                target = d.root / "write-floor" / "memory_manager_state"
                target.parent.mkdir()
                writes = latencies(
                    lambda _i, t=target, b=sample: atomic_write(t, b), s.latency_n // 2, 10
                )
                r.latency("numa_write_floor_16", "  write floor: the 16-node state", writes)
                r.value(
                    "numa_admit_grpc_16_less_write",
                    "  Admit 16 nodes less one durable write, / floor",
                    (figures[16, None] - pct(writes, 0.5)) / r.floor_p50,
                    "x",
                )
    r.value(
        "numa_admit_grpc_16_vs_2",
        "  Admit over gRPC 16 nodes / 2 nodes",
        figures[16, None] / figures[2, None],
        "",
    )


def podresources_phase(r: Report, root: Path, s: Scale) -> None:
    """Admit with and without pod names recorded, and podresources List as pods grow."""
    print("podresources: Admit with names kept, List by pod count", flush=True)
    n = max(s.latency_n // 5, 50)
    for tag, extra in (
        ("off", []),
        ("on", ["--podresources-socket", str(root / "pr" / "pr.sock")]),
    ):
        with daemon(root / f"podresources-{tag}", memory_gib=2048, extra=extra) as d:
            client = NumamemClient(d.socket, timeout=30)
            samples = latencies(
                lambda i, c=client, t=tag: c.admit(guaranteed(f"{t}-{i}", containers=3)), n, 20
            )
            r.latency(
                f"admit_names_{tag}",
                f"Admit, 3-container pod, --podresources-socket {tag}",
                samples,
            )
            if tag == "on":
                with grpc.insecure_channel(f"unix://{root / 'pr' / 'pr.sock'}") as ch:
                    stub = pr_grpc.PodResourcesListerStub(ch)
                    admitted = n + 20
                    for pods in (500, 2000):  # more than the pods Admit left above
                        while admitted < pods:
                            client.admit(guaranteed(f"fill-{admitted}", containers=3))
                            admitted += 1
                        listed: list[float] = []

                        def list_all(
                            i: int, listed: list[float] = listed, stub: Any = stub
                        ) -> None:
                            time.sleep(0.011)  # under the kubelet's 100/s rate limit
                            t = time.perf_counter()
                            stub.List(pr.ListPodResourcesRequest(), timeout=30)
                            listed.append(time.perf_counter() - t)

                        latencies(list_all, 100, 5)
                        r.latency(
                            f"podresources_list_{pods}", f"podresources List, {pods} pods", listed
                        )
            client.close()
