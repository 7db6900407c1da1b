"""numamem benchmarks (``make bench``): every figure beside a floor measured in the same run.

The floor is ``grpc.health.v1.Health/Check`` over the daemon's unix socket: the
cost of one gRPC round trip on this machine. Everything else is reported as
p50/p99 and as a ratio to the floor's p50, so runs on different machines
compare. The daemon is the real one (``python -m numamem serve``) on a fake
sysfs machine in a temporary directory, with durable checkpoints (fsync) on
that directory's file system.

Prints one table and writes every figure to ``bench/results/bench-<time>.json``.
``--quick`` shortens every phase (for a smoke run, not for numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import bounds, cli_start, hard_paths, large_numa, nri, readme, targets
from numamem.api.convert import hints_to_proto
from numamem.checkpoint.filestore import atomic_write
from numamem.checkpoint.mmstore import KubeletStateStore
from numamem.checkpoint.records import frame
from numamem.client import NumamemClient
from numamem.config.model import ReservedMemory
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.model import MemoryState
from numamem.memorymanager.state.reserved import get_system_reserved_memory
from numamem.memorymanager.state.store import InMemoryStore
from numamem.metacache import journal
from numamem.metacache.cache import State
from numamem.metacache.metrics.collector import Collector
from numamem.metacache.metrics.store import MetricStore
from numamem.metacache.persistence import STATE_FILE, encode
from numamem.metacache.types import ContainerInfo
from numamem.pod import Container, Pod
from numamem.quantity import parse_quantity
from numamem.testing.cgroups import V2, CgroupValues, write_container
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topology.machine import HugePagePool, Machine, NUMANode
from numamem.topologymanager import policy as tm
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from numamem.v1 import podresources_pb2 as pr
from numamem.v1 import podresources_pb2_grpc as pr_grpc

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
GI = 1024**3
STATIC = [
    "--memory-manager-policy=Static",
    "--reserved-memory=0:memory=1Gi",
    "--system-reserved=memory=924Mi",
    "--eviction-hard=memory.available<100Mi",
]


# --- measuring ------------------------------------------------------------------


@dataclass
class Scale:
    latency_n: int = 2000
    warmup: int = 200
    seconds: float = 3.0
    hints_n: int = 200
    large_pods: int = 2000
    large_containers: int = 10000
    journal_records: int = 50000
    numa_reps: int = 200
    hard_reps: int = 20
    target_iterations: int = 2000
    compactions: int = 6
    cli_runs: int = 30
    nri_pods: int = 40


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latencies(call: Callable[[int], object], n: int, warmup: int) -> list[float]:
    for i in range(warmup):
        call(-1 - i)
    out = []
    for i in range(n):
        t = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - t)
    return out


def throughput(
    make_worker: Callable[[int], Callable[[int], int]], threads: int, seconds: float
) -> float:
    """Operations per second: each thread calls its worker with 0, 1, 2, ... until time is up."""
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def run(t: int) -> None:
        work = make_worker(t)
        start.wait()
        i = 0
        while not stop.is_set():
            counts[t] += work(i)
            i += 1

    pool = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for th in pool:
        th.join()
    return sum(counts) / (time.perf_counter() - began)


@dataclass
class Report:
    floor_p50: float = 0.0
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def latency(self, key: str, label: str, samples: list[float]) -> None:
        p50, p99 = pct(samples, 0.5), pct(samples, 0.99)
        ratio = p50 / self.floor_p50 if self.floor_p50 else 0.0
        self.figures[key] = {
            "p50_ms": p50 * 1e3,
            "p99_ms": p99 * 1e3,
            "ratio_to_floor": ratio,
            "n": len(samples),
        }
        self.rows.append((label, f"{p50 * 1e3:.3f} ms", f"{p99 * 1e3:.3f} ms", f"{ratio:.2f}x"))
        print(
            f"  {label}: p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms, {ratio:.2f}x floor",
            flush=True,
        )

    def value(self, key: str, label: str, value: float, unit: str, note: str = "") -> None:
        self.figures[key] = value
        self.rows.append(
            (
                label,
                f"{value:.3f} {unit}" if isinstance(value, float) else f"{value} {unit}",
                "",
                note,
            )
        )
        print(f"  {label}: {value:.3f} {unit} {note}", flush=True)


# --- the daemon -----------------------------------------------------------------------


class Daemon(DaemonProcess):
    """The project's daemon harness plus what the benchmarks read of the process."""

    @property
    def metrics_socket(self) -> str:
        return str(self.root / "run" / "metrics.sock")

    def rss_bytes(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        t = psutil.Process(self.proc.pid).cpu_times()
        return float(t.user + t.system)

    def metric(self, name: str) -> float:
        """One sample of the daemon's Prometheus metrics (over its metrics socket)."""
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(self.metrics_socket)
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        sock.close()
        for line in data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@contextmanager
def daemon(
    root: Path,
    nodes: int = 2,
    memory_gib: int = 16,
    extra: list[str] | None = None,
    bound: str | None = None,
    real_admits: int = 1,
) -> Iterator[Daemon]:
    """The daemon on a fake machine in ``root``; ``bound`` (one of ``bench.bounds.BOUNDS``)
    runs it with Allocate and Admit replayed, for a target's floor, after one real Allocate
    and ``real_admits`` real Admits."""
    root.mkdir(parents=True, exist_ok=True)
    sysfs = root / "sys"
    if not sysfs.exists():
        write_sysfs(sysfs, standard_nodes(nodes, memory_gib=memory_gib))
    cgroup = root / "no-cgroups"  # unless a phase gives one: never sample this machine's cgroups
    cgroup.mkdir(exist_ok=True)
    extra = extra or []
    own = [] if "--cgroup-root" in extra else ["--cgroup-root", str(cgroup)]
    d = Daemon(root, ["--sysfs-root", str(sysfs), *STATIC, *own, *extra])
    if bound is not None:
        d.program = (sys.executable, "-m", "bench.bounds")
        d.cwd = Path(__file__).resolve().parent.parent  # where ``bench`` imports from
        d.env = {bounds.VARIABLE: bound, bounds.REAL_ADMITS: str(real_admits)}
    d.args += ["--metrics-socket", d.metrics_socket, "--log-level", "warning"]
    try:
        d.start(timeout=60)
        yield d
    finally:
        d.stop(timeout=30)


def guaranteed(uid: str, containers: int = 1, memory: str = "100Mi") -> mm.Pod:
    res = {"cpu": "1", "memory": memory}
    return mm.Pod(
        uid=uid, namespace="bench", name=uid,
        containers=[mm.Container(name=f"c{i}", requests=res, limits=res) for i in range(containers)],
    )  # fmt: skip


# --- phases ------------------------------------------------------------------------------


def floor_phase(r: Report, d: Daemon, s: Scale) -> None:
    print("floor: grpc.health.v1.Health/Check over the unix socket", flush=True)
    with grpc.insecure_channel(f"unix://{d.socket}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        req = health_pb2.HealthCheckRequest()
        samples = latencies(lambda _i: stub.Check(req, timeout=5), s.latency_n, s.warmup)
    r.floor_p50 = pct(samples, 0.5)
    r.latency("floor", "floor: Health/Check (1 client)", samples)

    def worker(_t: int) -> Callable[[int], int]:
        ch = grpc.insecure_channel(f"unix://{d.socket}")
        stub = health_pb2_grpc.HealthStub(ch)
        return lambda _i: (stub.Check(req, timeout=5), 1)[1]

    ops = throughput(worker, 8, s.seconds)
    r.value("floor_throughput_8", "floor: Health/Check throughput, 8 threads", ops, "ops/s")


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


def metacache_phase(r: Report, root: Path, s: Scale) -> None:
    print("MetaWriter AddContainer/UpdateContainers, durable and in memory", flush=True)
    for persist in (True, False):
        tag = "durable" if persist else "memory"
        extra = [] if persist else ["--no-metacache-persist"]
        with daemon(root / f"metacache-{tag}", extra=extra) as d:
            for writers in (1, 16):
                before = d.metric(
                    'numamem_checkpoint_write_duration_seconds_count{file="sys_advisor_state.journal"}'
                )
                done = [0]

                def add_worker(
                    t: int, w: int = writers, done: list[int] = done
                ) -> Callable[[int], int]:
                    c = NumamemClient(d.socket, timeout=30)

                    def work(i: int) -> int:
                        # 64 containers per writer, each add changing cpu_request: the cache stays
                        # node-sized (up to 1,024 containers) and every call is a real write.
                        c.add_container_info(
                            mc.ContainerInfo(pod_uid=f"p{w}-{t}-{i % 64}", container_name="c", qos_level="shared_cores",
                                             cpu_request=float(i // 64 % 32) + 1, owner_pool_name="share")
                        )  # fmt: skip
                        done[0] += 1
                        return 1

                    return work

                ops = throughput(add_worker, writers, s.seconds)
                writes = (
                    d.metric(
                        'numamem_checkpoint_write_duration_seconds_count{file="sys_advisor_state.journal"}'
                    )
                    - before
                )
                r.value(
                    f"metacache_add_{tag}_{writers}",
                    f"MetaWriter.AddContainer {tag}, {writers} writer(s)",
                    ops,
                    "ops/s",
                )
                if persist:
                    r.value(f"metacache_add_fsyncs_per_op_{writers}", f"  journal appends per AddContainer, {writers} writer(s)",
                            writes / max(done[0], 1), "writes/op")  # fmt: skip

                def update_worker(t: int, w: int = writers) -> Callable[[int], int]:
                    c = NumamemClient(d.socket, timeout=30)
                    c.add_container_info(mc.ContainerInfo(pod_uid=f"u{w}-{t}", container_name="c"))

                    def work(i: int) -> int:
                        c.update_containers(
                            [mc.ContainerUpdate(pod_uid=f"u{w}-{t}", container_name="c",
                                                info=mc.ContainerInfo(cpu_request=float(i % 64) + 1),
                                                update_mask={"paths": ["cpu_request"]})]
                        )  # fmt: skip
                        return 1

                    return work

                ops = throughput(update_worker, writers, s.seconds)
                r.value(
                    f"metacache_update_{tag}_{writers}",
                    f"MetaWriter.UpdateContainers {tag}, {writers} writer(s)",
                    ops,
                    "ops/s",
                )
    for op in ("add", "update"):
        durable = r.figures[f"metacache_{op}_durable_16"]
        memory = r.figures[f"metacache_{op}_memory_16"]
        r.value(f"metacache_{op}_durable_share_16", f"{op}: durable / in-memory throughput, 16 writers",
                durable / memory, "", "(target >= 0.50)")  # fmt: skip


def metacache_growth_phase(r: Report, root: Path, s: Scale) -> None:
    """Durable AddContainer p50 as the cache grows: the cost must follow the change."""
    sizes = (100, 1000, s.large_containers)
    print(f"MetaWriter.AddContainer (durable) with {', '.join(map(str, sizes))} containers "
          "in the cache", flush=True)  # fmt: skip
    n = max(s.latency_n // 4, 50)
    with daemon(root / "metacache-growth") as d:
        filled = 0
        for size in sizes:
            # Fill with the same RPC, 16 writers at once (group commit keeps this quick).
            todo = list(range(filled, size))
            filled = size

            def fill(t: int, todo: list[int] = todo) -> None:
                with NumamemClient(d.socket, timeout=60) as c:
                    for i in todo[t::16]:
                        c.add_container_info(
                            mc.ContainerInfo(pod_uid=f"fill-{i // 5}", container_name=f"c{i % 5}", qos_level="shared_cores",
                                             cpu_request=2, owner_pool_name="share", labels={"app": "bench"})
                        )  # fmt: skip

            threads = [threading.Thread(target=fill, args=(t,)) for t in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            client = NumamemClient(d.socket, timeout=30)

            def probe(i: int, size: int = size, c: NumamemClient = client) -> None:
                c.add_container_info(
                    mc.ContainerInfo(pod_uid=f"probe-{size}", container_name=f"c{i}", qos_level="shared_cores",
                                     cpu_request=1, owner_pool_name="share")
                )  # fmt: skip

            samples = latencies(probe, n, 20)
            client.remove_pod(f"probe-{size}")
            client.close()
            r.latency(
                f"metacache_add_p50_at_{size}",
                f"AddContainer (durable), {size} containers in the cache",
                samples,
            )
        small = r.figures[f"metacache_add_p50_at_{sizes[0]}"]["p50_ms"]
        large = r.figures[f"metacache_add_p50_at_{sizes[-1]}"]["p50_ms"]
        r.value("metacache_add_growth", f"  AddContainer p50, {sizes[-1]} / {sizes[0]} containers", large / small,
                "", "(target <= 1.5)")  # fmt: skip
        r.figures["metacache_growth_files"] = {
            p.name: p.stat().st_size for p in Path(d.state_dir).iterdir() if p.name.startswith("sys_advisor")
        }  # fmt: skip


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


def write_large_state(state_dir: Path, sysfs: Path, s: Scale) -> None:
    """2,000 three-container pods in memory_manager_state (with their container ids), 10,000
    containers in the sys_advisor_state snapshot and 50,000 journal records after it."""
    from numamem.topology.sysfs import discover

    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    machine = discover(str(sysfs))
    q = parse_quantity
    reserved = get_system_reserved_memory(
        machine, {"memory": q("1Gi")}, [ReservedMemory(0, (("memory", q("1Gi")),))]
    )
    policy = StaticPolicy(machine, reserved)
    memory_store = InMemoryStore()
    topology, _ = tm.new_policy("none", machine, {})
    manager = Manager(policy, memory_store, topology, "container")
    manager.start()
    res = {"cpu": q("1"), "memory": q("100Mi")}
    for i in range(s.large_pods):
        pod = Pod(
            f"pod-{i:05d}", containers=tuple(Container(f"c{j}", res, dict(res)) for j in range(3))
        )
        for j in range(3):
            manager.allocate(pod, f"c{j}")
            manager.add_container(pod, f"c{j}", f"cid-{i:05d}-{j}")
    assert memory_store.saved is not None
    KubeletStateStore(state_dir).save(memory_store.saved)
    pods: dict[str, dict[str, ContainerInfo]] = {}
    for i in range(s.large_containers // 5):
        uid = f"mc-{i:05d}"
        pods[uid] = {
            f"c{j}": ContainerInfo(pod_uid=uid, container_name=f"c{j}", qos_level="shared_cores", cpu_request=2,
                                   owner_pool_name="share", labels={"app": "bench"}, container_id=f"mcid-{i}-{j}")
            for j in range(5)
        }  # fmt: skip
    # The metacache as a daemon killed before compacting would leave it: a snapshot and a long
    # journal of one-container changes (the layout numamem.metacache.journal documents).
    (state_dir / STATE_FILE).write_bytes(encode(State(pods=pods), generation=0))
    records = [journal.header(0)]
    for seq in range(1, s.journal_records + 1):
        uid = f"mc-{seq * 7919 % len(pods):05d}"
        name = f"c{seq % 5}"
        info = pods[uid][name].clone()
        info.cpu_request = float(seq % 8 + 1)
        payload = f'{{"pods":{{"{uid}":{{"{name}":{info.fragment()}}}}},"seq":{seq}}}'
        records.append(frame(payload.encode()))
    (state_dir / journal.JOURNAL_FILE).write_bytes(b"".join(records))


def startup_phase(r: Report, root: Path, s: Scale) -> None:
    print(
        f"start-up and RSS: empty, and {s.large_containers} metacache containers (+ "
        f"{s.journal_records} journal records) + {s.large_pods} pods",
        flush=True,
    )
    with daemon(root / "startup-empty", memory_gib=2048) as d:
        r.value("startup_empty_s", "start-up to SERVING, empty state", d.startup_seconds, "s")
        r.value("rss_empty_mb", "RSS, empty state", d.rss_bytes() / 2**20, "MiB")
    big = root / "startup-large"
    big.mkdir()
    write_sysfs(big / "sys", standard_nodes(2, memory_gib=2048))
    write_large_state(big / "state", big / "sys", s)
    sizes = {p.name: p.stat().st_size for p in (big / "state").iterdir()}
    r.figures["large_state_file_bytes"] = sizes
    with daemon(big, memory_gib=2048, extra=["--metric-interval=3600"]) as d:
        r.value(
            "startup_large_s",
            "start-up to SERVING, large state",
            d.startup_seconds,
            "s",
            "(target <= 2 s)",
        )
        client = NumamemClient(d.socket, timeout=30)
        state = client.get_state()
        assert len(state.entries) == s.large_pods, len(state.entries)
        assert sum(1 for _ in client.list_containers()) == s.large_containers
        r.value(
            "rss_large_mb", "RSS, large state", d.rss_bytes() / 2**20, "MiB", "(target <= 150 MB)"
        )
        samples = latencies(lambda i: client.admit(guaranteed(f"late-{i}", containers=3)), 50, 5)
        r.latency("admit_large_state", f"Admit with {s.large_pods} pods in the state", samples)
        client.close()


def metrics_phase(r: Report, root: Path, s: Scale) -> None:
    print("container metrics: GetContainerMetric, collector cost per 100 containers", flush=True)
    cg = root / "cgroup"
    targets = []
    for i in range(100):
        uid = f"00000000-0000-4000-8000-{i:012d}"
        cid = f"{i:064x}"
        values = CgroupValues(
            usage_ns=10**9 * i, memory_usage=GI, rss=GI // 2, numa={0: (GI // 4, GI // 4)}
        )
        write_container(cg, V2, "systemd", "guaranteed", uid, cid, values)
        targets.append((uid, "c", cid))
    store = MetricStore()
    collector = Collector(store, cg, lambda: targets)
    collector.sample_once()
    rounds = 10 if s.latency_n < 2000 else 50
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        collector.sample_once()
    cpu = (time.process_time() - cpu0) / rounds
    wall = (time.perf_counter() - wall0) / rounds
    r.value("collector_cpu_ms_per_100", "collector CPU per sample, 100 containers", cpu * 1e3, "ms")
    r.value(
        "collector_wall_ms_per_100",
        "collector wall time per sample, 100 containers",
        wall * 1e3,
        "ms",
    )
    with daemon(
        root / "metrics", extra=["--cgroup-root", str(cg), "--metric-interval", "0.5"]
    ) as d:
        client = NumamemClient(d.socket, timeout=10)
        for uid, name, cid in targets:
            client.add_container_info(
                mc.ContainerInfo(pod_uid=uid, container_name=name, container_id=cid)
            )
        uid = targets[0][0]
        deadline = time.perf_counter() + 10
        while True:
            try:
                client.get_container_metric(uid, "c", "mem.usage.container")
                break
            except grpc.RpcError:
                if time.perf_counter() > deadline:
                    raise
                time.sleep(0.1)
        samples = latencies(
            lambda _i: client.get_container_metric(uid, "c", "mem.usage.container"),
            s.latency_n,
            s.warmup,
        )
        r.latency("get_container_metric", "GetContainerMetric", samples)
        client.close()


# --- main -------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short phases: a smoke run, not numbers"
    )
    parser.add_argument(
        "--only", action="append", default=[], help="run only these phases (repeatable)"
    )
    parser.add_argument(
        "--readme",
        action="store_true",
        help="make this run README.md's performance table (bench/readme.py)",
    )
    parser.add_argument(
        "--baseline",
        default=large_numa.BASELINE,
        help="revision the numa phase compares with ('' for none)",
    )
    args = parser.parse_args()
    s = (
        Scale(
            latency_n=200,
            warmup=20,
            seconds=0.5,
            hints_n=20,
            large_pods=200,
            large_containers=1000,
            journal_records=2000,
            numa_reps=20,
            hard_reps=3,
            target_iterations=200,
            compactions=1,
            cli_runs=5,
            nri_pods=5,
        )
        if args.quick
        else Scale()
    )
    phases = [
        "memory", "targets", "hints", "numa", "hard", "metacache", "podresources", "startup",
        "metrics", "cli", "nri",
    ]  # fmt: skip
    chosen = args.only or phases
    root = Path(tempfile.mkdtemp(prefix="nmbench-", dir="/tmp"))
    report = Report()
    report.figures["machine"] = {
        "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
        "quick": args.quick, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    began = time.perf_counter()
    try:
        with daemon(root / "main") as d:
            floor_phase(report, d, s)
            if "memory" in chosen:
                memory_manager_phase(report, d, s)
        if "targets" in chosen:
            targets.phase(report, root, s.target_iterations, s.compactions)
        if "hints" in chosen:
            hint_phase(report, root, s)
        if "numa" in chosen:
            large_numa.phase(report, root, s.numa_reps, args.baseline)
            numa_grpc_phase(report, root, s)
        if "hard" in chosen:
            hard_paths.phase(report, root, s.hard_reps)
        if "metacache" in chosen:
            metacache_phase(report, root, s)
            metacache_growth_phase(report, root, s)
        if "podresources" in chosen:
            podresources_phase(report, root, s)
        if "startup" in chosen:
            startup_phase(report, root, s)
        if "metrics" in chosen:
            metrics_phase(report, root, s)
        if "cli" in chosen:
            cli_start.phase(report, root, s.cli_runs)
        if "nri" in chosen:
            nri.phase(report, root, s.nri_pods)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.figures["bench_seconds"] = time.perf_counter() - began
    print()
    width = max(len(row[0]) for row in report.rows)
    print(f"{'figure'.ljust(width)}  {'p50 / value':>16}  {'p99':>12}  vs floor / note")
    for label, a, b, c in report.rows:
        print(f"{label.ljust(width)}  {a:>16}  {b:>12}  {c}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report.figures["rows"] = [list(row) for row in report.rows]
    out.write_text(json.dumps(report.figures, indent=2, sort_keys=True) + "\n")
    print(
        f"\n{len(report.figures)} figures written to {out.relative_to(REPO)} in {report.figures['bench_seconds']:.0f} s"
    )
    if args.readme:
        if args.only or args.quick:
            print("--readme needs a full run (no --only, no --quick): README.md unchanged")
            return 1
        readme.publish(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
