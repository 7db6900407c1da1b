"""File and socket permissions, no TCP but the health port, health under 64 clients, deadlines."""

from __future__ import annotations

import os
import stat
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from numamem.api.memorymanager import MemoryManagerComponent
from numamem.client import NumamemClient
from numamem.config.model import Limits
from numamem.pod import Pod
from numamem.testing.daemon import DaemonProcess
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.testing.sysfs import standard_nodes, write_sysfs
from numamem.topologymanager.policy import ProviderHints
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from tests.daemon import STATIC_ARGS
from tests.ports import on_free_ports

pytestmark = pytest.mark.e2e


def start(root: Path, factory: list[DaemonProcess], *extra: str) -> DaemonProcess:
    write_sysfs(root / "sys", standard_nodes(2))
    d = DaemonProcess(
        root, ["--sysfs-root", str(root / "sys"), *STATIC_ARGS, "--log-level", "warning", *extra]
    )
    factory.append(d)
    return d.start()


def pod(uid: str, memory: str = "256Mi") -> mm.Pod:
    res = {"cpu": "1", "memory": memory}
    return mm.Pod(uid=uid, containers=[mm.Container(name="c", requests=res, limits=res)])


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def hold_hints(
    server: InProcessServer, entered: Callable[[], object], release: threading.Event
) -> None:
    """Makes the daemon's GetTopologyHints, on entry, call ``entered()`` and hold its worker
    until ``release`` is set (30 s at most) before it answers."""
    component = server.component(MemoryManagerComponent)
    manager = component.manager
    real = manager.get_topology_hints

    def held(pod: Pod, container_name: str, **kwargs: Any) -> ProviderHints:
        entered()
        release.wait(30)
        return real(pod, container_name, **kwargs)

    manager.get_topology_hints = held  # type: ignore[method-assign]


def test_files_and_directories_are_private(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    with NumamemClient(d.socket) as c:
        assert c.admit(pod("p")).admitted
        c.add_container(pod("p"), "c", "cid")
        c.set_container_info(mc.ContainerInfo(pod_uid="p", container_name="c"))
    state = Path(d.state_dir)
    assert mode(state) == 0o700
    for name in ("memory_manager_state", "numamem_containers", "sys_advisor_state", "numamem.lock"):
        assert mode(state / name) == 0o600, name
    assert mode(d.socket) == 0o660
    assert mode(Path(d.socket).parent) == 0o750


def listening_tcp_ports(pid: int) -> set[int]:
    return {address[1] for address in listening(pid)}


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP listener; grpc binds IPv4 as v4-mapped IPv6 (::ffff:a.b.c.d)."""
    return {
        (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def test_nothing_but_the_health_port_listens_on_tcp(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    assert d.proc is not None
    assert listening_tcp_ports(d.proc.pid) == set()
    d.stop()
    args = list(d.args)

    def with_health_port(ports: list[int]) -> int:
        d.args = [*args, "--health-port", str(ports[0])]
        d.start()
        return ports[0]

    port = on_free_ports(with_health_port)
    assert listening(d.proc.pid) == {("127.0.0.1", port)}  # loopback unless told otherwise


@pytest.mark.parametrize("address", ["::1", "[::1]", "::"])
def test_health_and_metrics_listen_on_ipv6_addresses(
    short_root: Path, daemon_factory: list[DaemonProcess], address: str
) -> None:
    d, (health_port, metrics_port) = on_free_ports(
        lambda ports: (
            start(
                short_root,
                daemon_factory,
                f"--health-address={address}",
                f"--health-port={ports[0]}",
                f"--metrics-address={address}",
                f"--metrics-port={ports[1]}",
            ),
            ports,
        ),
        2,
    )
    assert d.proc is not None
    bare = address.strip("[]")
    assert listening(d.proc.pid) == {(bare, health_port), (bare, metrics_port)}
    with grpc.insecure_channel(f"[::1]:{health_port}") as ch:
        assert NumamemClient(channel=ch, timeout=5).check_health() == 1
    with urllib.request.urlopen(f"http://[::1]:{metrics_port}/metrics", timeout=5) as resp:
        assert b"numamem_numa_memory_bytes" in resp.read()


def test_health_answers_within_its_deadline_under_64_clients(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    d = start(short_root, daemon_factory)
    stop = threading.Event()
    errors: list[str] = []

    def load(n: int) -> None:
        with NumamemClient(d.socket, timeout=30) as c:
            i = 0
            while not stop.is_set():
                uid = f"l{n}-{i}"
                i += 1
                try:
                    if c.admit(pod(uid)).admitted:
                        c.add_container(pod(uid), "c", uid)
                        c.remove_container(uid)
                    c.set_container_info(
                        mc.ContainerInfo(pod_uid=f"m{n}", container_name="c", cpu_request=i)
                    )
                except grpc.RpcError as err:
                    errors.append(f"{err.code()}: {err.details()}")

    threads = [threading.Thread(target=load, args=(n,), daemon=True) for n in range(64)]
    for t in threads:
        t.start()
    latencies = []
    try:
        time.sleep(0.5)
        with NumamemClient(d.socket, timeout=2.0) as probe:
            for _ in range(40):
                started = time.monotonic()
                assert probe.check_health() == 1  # SERVING, within the 2 s deadline
                latencies.append(time.monotonic() - started)
                time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    assert max(latencies) < 2.0


def test_client_deadlines_are_honoured() -> None:
    """A request whose deadline passes while it waits for a worker is not worked on.

    The daemon's own bootstrap and interceptor, in-process with one worker thread; the
    worker is held by a GetTopologyHints call that waits until the test releases it.
    """
    release = threading.Event()
    entered = threading.Event()
    with serve_in_process(workers=1) as server:
        hold_hints(server, entered.set, release)
        slow_done = threading.Event()

        def slow() -> None:
            with NumamemClient(server.socket, timeout=60) as c:
                c.get_topology_hints(pod("hints", "1Gi"), "c")
            slow_done.set()

        worker = threading.Thread(target=slow)
        worker.start()
        assert entered.wait(10)
        started = time.monotonic()
        with NumamemClient(server.socket, timeout=0.2) as hurried:
            with pytest.raises(grpc.RpcError) as info:
                hurried.admit(pod("late"))
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 1.0
        assert not slow_done.is_set()
        release.set()
        worker.join(30)
        assert slow_done.is_set()
        assert "late" not in server.client.get_state().entries  # never applied
        assert server.client.check_health() == 1


def test_overload_is_refused_at_once_and_health_still_answers() -> None:
    """Both workers held, at most 4 RPCs in flight: 64 clients get RESOURCE_EXHAUSTED at once
    (none queues), while Health/Check, on its own pool, answers SERVING throughout."""
    release = threading.Event()
    entered = threading.Semaphore(0)
    with serve_in_process(workers=2, limits=replace(Limits(), max_concurrent_rpcs=4)) as server:
        hold_hints(server, entered.release, release)

        def hint() -> None:
            with NumamemClient(server.socket, timeout=60) as c:
                c.get_topology_hints(pod("hints", "1Gi"), "c")

        holders = [threading.Thread(target=hint) for _ in range(2)]
        for t in holders:
            t.start()
        assert entered.acquire(timeout=10) and entered.acquire(timeout=10)
        codes: list[grpc.StatusCode] = []
        lock = threading.Lock()

        def client(n: int) -> None:
            with NumamemClient(server.socket, timeout=20) as c:
                try:
                    c.admit(pod(f"o{n}"))
                    code = grpc.StatusCode.OK
                except grpc.RpcError as err:
                    code = err.code()
                    assert "--max-concurrent-rpcs" in (err.details() or "")
                with lock:
                    codes.append(code)

        clients = [threading.Thread(target=client, args=(n,)) for n in range(64)]
        started = time.monotonic()
        for t in clients:
            t.start()
        with NumamemClient(server.socket, timeout=2.0) as probe:
            for _ in range(10):
                assert probe.check_health() == 1  # SERVING while the workers are busy
        deadline = time.monotonic() + 10
        while len(codes) < 62 and time.monotonic() < deadline:
            time.sleep(0.01)
        refused_within = time.monotonic() - started
        release.set()
        for t in [*holders, *clients]:
            t.join(30)
        # 2 holders + at most 2 queued admissions are in flight; the others are refused at once.
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 62
        assert set(codes) <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OK}
        assert refused_within < 5
        assert server.client.check_health() == 1
