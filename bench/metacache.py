"""The metacache and the metrics collector (``make bench`` phases ``metacache`` and
``metrics``): MetaWriter throughput durable and in memory, the durable AddContainer as the
cache grows, the collector's cost per 100 containers and GetContainerMetric.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from bench.harness import (
    GI,
    Report,
    Scale,
    daemon,
    latencies,
    throughput,
)
from numamem.client import NumamemClient
from numamem.metacache.metrics.collector import Collector
from numamem.metacache.metrics.store import MetricStore
from numamem.testing.cgroups import V2, CgroupValues, write_container
from numamem.v1 import metacache_pb2 as mc
from tests.daemon import run_together


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

            run_together([threading.Thread(target=fill, args=(t,)) for t in range(16)])
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
