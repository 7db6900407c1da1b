"""``Type=notify``: the real daemon tells a service manager when it is ready, what it is doing,
that it stops, and pings its watchdog. The service manager is a datagram socket the test binds
(a path, or an abstract name written ``@name`` as systemd passes it)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from numamem.testing.daemon import DaemonProcess
from tests.daemon import serve_to_exit

pytestmark = pytest.mark.e2e


class ServiceManager:
    """The receiving end of NOTIFY_SOCKET: every datagram as a list of lines."""

    def __init__(self, address: str) -> None:
        self.env_value = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.received: list[list[str]] = []

    def next(self, timeout: float = 20.0) -> list[str]:
        self.sock.settimeout(timeout)
        lines = self.sock.recv(4096).decode().split("\n")
        self.received.append(lines)
        return lines

    def until(self, line: str, timeout: float = 20.0) -> list[list[str]]:
        """Datagrams up to and including the first that holds ``line``."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.next(max(0.1, deadline - time.monotonic()))
            got.append(message)
            if line in message:
                return got

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(params=["path", "abstract"])
def manager(request: pytest.FixtureRequest, short_root: Path) -> Iterator[ServiceManager]:
    name = f"@numamem-test-{os.getpid()}-{time.monotonic_ns()}"
    address = str(short_root / "notify.sock") if request.param == "path" else name
    m = ServiceManager(address)
    yield m
    m.close()


def health(sock: str) -> int:
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        return int(
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        )


def test_ready_when_serving_status_while_restoring_stopping_and_watchdog(
    manager: ServiceManager, short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    daemon = DaemonProcess(
        short_root,
        env={"NOTIFY_SOCKET": manager.env_value, "WATCHDOG_USEC": "200000"},
    )
    daemon_factory.append(daemon)
    daemon.start(wait=False)
    before_ready = manager.until("READY=1")
    # Health is SERVING once READY=1 arrived. That it is never sent before (a check here
    # runs after READY=1 arrived, so it cannot see the order) is tested in
    # tests/unit/test_sdnotify_ready.py: its notifier reads health at the moment it is called.
    assert health(daemon.socket) == health_pb2.HealthCheckResponse.SERVING
    statuses = [line for message in before_ready for line in message if line.startswith("STATUS=")]
    assert statuses[:2] == [
        "STATUS=discovering the topology and checking the configuration",
        "STATUS=restoring: topology",
    ]
    assert "STATUS=restoring: memory manager" in statuses
    assert "STATUS=restoring: metacache" in statuses
    assert statuses[-1] == f"STATUS=serving on {daemon.socket}"
    assert before_ready[-1] == ["READY=1", f"STATUS=serving on {daemon.socket}"]
    # The watchdog is pinged every half WATCHDOG_USEC from the serving loop.
    assert manager.next() == ["WATCHDOG=1"]
    assert manager.next() == ["WATCHDOG=1"]
    assert daemon.stop() == 0
    after = manager.until("STOPPING=1")
    assert after[-1] == ["STOPPING=1", "STATUS=stopping"]
    assert all(m == ["WATCHDOG=1"] for m in after[:-1])


def test_no_watchdog_pings_for_another_pid(
    manager: ServiceManager, short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """WATCHDOG_PID names the process the service manager watches: not this one, no pings."""
    daemon = DaemonProcess(
        short_root,
        env={"NOTIFY_SOCKET": manager.env_value, "WATCHDOG_USEC": "20000", "WATCHDOG_PID": "1"},
    )
    daemon_factory.append(daemon)
    daemon.start(wait=False)
    manager.until("READY=1")
    time.sleep(0.3)  # 30 ping periods, if it pinged
    assert daemon.stop() == 0
    after = manager.until("STOPPING=1")
    assert after == [["STOPPING=1", "STATUS=stopping"]]


def test_a_refused_start_says_why_and_is_never_ready(
    short_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = ServiceManager(str(short_root / "notify.sock"))
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", manager.env_value)
        out = serve_to_exit(
            short_root, "--memory-manager-policy", "Static", "--reserved-memory", "0:memory=1Gi"
        )
        assert out.returncode == 1
        manager.sock.setblocking(False)
        messages = []
        while True:
            try:
                messages.append(manager.sock.recv(4096).decode().split("\n"))
            except BlockingIOError:
                break
        lines = [line for message in messages for line in message]
        assert "READY=1" not in lines and "STOPPING=1" not in lines
        assert lines[-1].startswith("STATUS=start refused: ")
        assert lines[-1].removeprefix("STATUS=start refused: ") in out.stderr
    finally:
        manager.close()


def test_a_service_manager_that_never_reads_stops_neither_the_start_nor_sigterm(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """Before: once the receiver's queue was full, sendto blocked: the daemon never served,
    or served and then never stopped on SIGTERM (the serving loop waited in a ping)."""
    deaf = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    deaf.bind(str(short_root / "notify.sock"))
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    filler.setblocking(False)
    with contextlib.suppress(BlockingIOError):  # fill its queue (net.unix.max_dgram_qlen)
        for _ in range(100000):
            filler.sendto(b"STATUS=filler", str(short_root / "notify.sock"))
    try:
        daemon = DaemonProcess(
            short_root,
            env={"NOTIFY_SOCKET": str(short_root / "notify.sock"), "WATCHDOG_USEC": "200000"},
        )
        daemon_factory.append(daemon)
        daemon.start()
        assert daemon.stop() == 0, daemon.stderr()
        stderr = daemon.stderr()
        assert stderr.count("cannot notify the service manager") == 1, stderr
        assert "the service manager's queue is full" in stderr
    finally:
        filler.close()
        deaf.close()


def test_a_watchdog_usec_above_the_longest_wait_serves_and_stops(
    manager: ServiceManager, short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """Before: WATCHDOG_USEC above threading.TIMEOUT_MAX (2e16 us) killed the daemon with
    OverflowError right after READY=1. Now it pings every hour at most."""
    daemon = DaemonProcess(
        short_root, env={"NOTIFY_SOCKET": manager.env_value, "WATCHDOG_USEC": "2" + "0" * 16}
    )
    daemon_factory.append(daemon)
    daemon.start()
    manager.until("READY=1")
    assert health(daemon.socket) == health_pb2.HealthCheckResponse.SERVING
    assert daemon.stop() == 0, daemon.stderr()
    assert manager.until("STOPPING=1")[-1] == ["STOPPING=1", "STATUS=stopping"]
