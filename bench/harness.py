"""What every ``make bench`` phase uses: the run's scale, the measuring (percentiles, latencies,
throughput), the report, and the real daemon on a fake machine.

Every figure is reported beside a floor measured in the same run (:func:`floor_phase`: one
``grpc.health.v1.Health/Check`` round trip over the daemon's unix socket), as p50/p99 and as a
ratio to the floor's p50 (:class:`Report`). :func:`daemon` starts ``numamem serve`` (or, with
``bound``, :mod:`bench.bounds`) on a fake sysfs machine in a directory of the caller's, with
durable checkpoints on that directory's file system, and stops it on exit. Imports no phase.
"""

from __future__ import annotations

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

from bench import bounds
from numamem.testing.daemon import STATIC_ARGS, DaemonProcess
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm

GI = 1024**3


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


def run_alone(phase: Callable[[Report, Path, int], None], count: int, prefix: str) -> int:
    """One phase outside ``make bench`` (``python -m bench.<phase>``): run in a temporary
    directory under /tmp named ``prefix...``, its figures printed by a :class:`Report`."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir="/tmp") as root:
        phase(Report(), Path(root), count)
    return 0


class Daemon(DaemonProcess):
    """The project's daemon harness plus what the benchmarks read of the process."""

    @property
    def metrics_socket(self) -> str:
        return str(self.root / "run" / "metrics.sock")

    def rss_bytes(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

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


def shipped(root: Path) -> list[str]:
    """The daemon flags of deploy/kubernetes/daemonset.yaml that change an Admit's cost: the
    journal commit and the podresources names (a name appended per new pod), so the figures
    are those of the shipped configuration (tests/unit/test_mm_journal.py checks the
    DaemonSet still has them)."""
    return ["--state-commit=journal", f"--podresources-socket={root / 'podresources.sock'}"]


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
    d = Daemon(root, ["--sysfs-root", str(sysfs), *STATIC_ARGS, *own, *extra])
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
