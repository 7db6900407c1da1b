"""READY=1 goes out the first time health is SERVING, which is later than the end of the
start while a checkpoint's durability is unknown; STATUS= says why while not serving
(api/server.py). The notifier here reads the daemon's health at the moment it is called,
so the order is what is tested (a service manager in another process only sees READY=1
arrive, and health checked after that is SERVING either way)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from numamem.api.sdnotify import Notifier
from numamem.api.server import Daemon
from numamem.config.model import Config

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class RecordingNotifier(Notifier):
    """Records each notification with the health status at the moment it is sent."""

    def __init__(self) -> None:
        super().__init__({})
        self.daemon: Daemon | None = None
        self.sent: list[tuple[str, str, int]] = []

    def _health(self) -> int:
        """The daemon's health servicer's answer now (UNKNOWN before it has a status)."""
        assert self.daemon is not None
        request = health_pb2.HealthCheckRequest()
        return int(self.daemon.health.Check(request, _Context()).status)

    def ready(self, status: str) -> None:
        self.sent.append(("READY=1", status, self._health()))

    def status(self, text: str) -> None:
        self.sent.append(("STATUS", text, self._health()))


class _Context:
    """What the health servicer's Check touches of a context (an unknown service)."""

    def set_code(self, code: grpc.StatusCode) -> None:
        return None


class Component:
    """A component whose start() may report a checkpoint's durability unknown."""

    service_names: Sequence[str] = ()

    def __init__(self, problem: str | None = None) -> None:
        self.problem = problem
        self.report: Callable[[str, str | None], None] | None = None

    def load(self) -> None:
        return None

    def register(self, server: grpc.Server) -> None:
        return None

    def watch_durability(self, report: Callable[[str, str | None], None]) -> None:
        self.report = report

    def start(self) -> None:
        if self.problem is not None:
            assert self.report is not None
            self.report("memory_manager_state", self.problem)

    def stop(self) -> None:
        return None


def started(short_root: Path, component: Component) -> tuple[Daemon, RecordingNotifier]:
    notifier = RecordingNotifier()
    config = Config(socket=str(short_root / "run" / "s.sock"), state_dir=str(short_root / "st"))
    daemon = Daemon(config, lambda cfg: [component], notifier=notifier, set_umask=False)
    notifier.daemon = daemon
    daemon.start()
    return daemon, notifier


def after_start(notifier: RecordingNotifier) -> list[tuple[str, str, int]]:
    return [
        s
        for s in notifier.sent
        if not s[1].startswith(("discovering", "restoring", "bind", "starting"))
    ]


@pytest.fixture
def cleanup() -> Iterator[list[Daemon]]:
    daemons: list[Daemon] = []
    yield daemons
    for daemon in daemons:
        daemon.shutdown()


def test_ready_is_sent_when_health_is_serving(short_root: Path, cleanup: list[Daemon]) -> None:
    daemon, notifier = started(short_root, Component())
    cleanup.append(daemon)
    sock = daemon.config.socket
    assert after_start(notifier) == [("READY=1", f"serving on {sock}", SERVING)]


def test_ready_waits_for_a_checkpoint_of_unknown_durability(
    short_root: Path, cleanup: list[Daemon]
) -> None:
    """Before: READY=1 'serving on ...' went out while health was NOT_SERVING, so
    Before=kubelet.service let the kubelet start against a daemon that refuses writes."""
    component = Component("fsync of the directory failed: EIO")
    daemon, notifier = started(short_root, component)
    cleanup.append(daemon)
    sock = daemon.config.socket
    not_serving = (
        "not serving: the durability of memory_manager_state is unknown (fsync of the "
        "directory failed: EIO); serving again once a write of it succeeds"
    )
    assert after_start(notifier) == [("STATUS", not_serving, NOT_SERVING)]
    assert component.report is not None
    component.report("memory_manager_state", None)  # a later write succeeded
    assert after_start(notifier)[-1] == ("READY=1", f"serving on {sock}", SERVING)
    # Unknown again, then durable again: STATUS lines, READY=1 only once.
    component.report("memory_manager_state", "EIO again")
    component.report("memory_manager_state", "EIO again")  # same reason: no new line
    component.report("memory_manager_state", None)
    kinds = [(kind, health) for kind, _, health in after_start(notifier)]
    assert kinds == [
        ("STATUS", NOT_SERVING),
        ("READY=1", SERVING),
        ("STATUS", NOT_SERVING),
        ("STATUS", SERVING),
    ]


def test_the_recorder_sees_what_the_daemon_sends(short_root: Path) -> None:
    """The recorder's health reading is the daemon's own servicer (not vacuous)."""
    notifier = RecordingNotifier()
    daemon = Daemon(Config(), lambda cfg: [], notifier=notifier)
    notifier.daemon = daemon
    daemon.health.set("", NOT_SERVING)
    notifier.ready("x")
    daemon.health.set("", SERVING)
    notifier.ready("y")
    assert [s[2] for s in notifier.sent] == [NOT_SERVING, SERVING]
