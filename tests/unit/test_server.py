"""In-process daemon: readiness gating, error mapping, graceful shutdown with in-flight RPCs."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from numamem.api.server import Daemon
from numamem.config.model import Config
from numamem.errors import NotFoundError, PersistenceError, StartupError
from numamem.v1 import topology_pb2, topology_pb2_grpc

TOPOLOGY = "numamem.v1.Topology"


class ScriptedTopology(topology_pb2_grpc.TopologyServicer):
    """GetMachineInfo runs whatever the test put in ``behave``."""

    def __init__(self) -> None:
        self.behave: Callable[[], topology_pb2.MachineInfo] = topology_pb2.MachineInfo

    def GetMachineInfo(
        self, request: topology_pb2.GetMachineInfoRequest, context: grpc.ServicerContext
    ) -> topology_pb2.MachineInfo:
        return self.behave()


class FakeComponent:
    service_names: Sequence[str] = (TOPOLOGY,)

    def __init__(self) -> None:
        self.servicer = ScriptedTopology()
        self.release = threading.Event()
        self.release.set()
        self.stopped = False

    def register(self, server: grpc.Server) -> None:
        topology_pb2_grpc.add_TopologyServicer_to_server(self.servicer, server)

    def load(self) -> None:
        if self.refuse_load:
            raise StartupError(self.refuse_load)

    def start(self) -> None:
        assert self.release.wait(10)

    def stop(self) -> None:
        self.stopped = True

    def watch_durability(self, report: Callable[[str, str | None], None]) -> None:
        self.report = report

    refuse_load = ""
    report: Callable[[str, str | None], None] | None = None


@pytest.fixture
def umask_restored() -> Iterator[None]:
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


@pytest.fixture
def config(short_root: Path, umask_restored: None) -> Config:
    return Config(
        socket=str(short_root / "run" / "n.sock"),
        state_dir=str(short_root / "state"),
        shutdown_grace_seconds=3.0,
        workers=4,
    )


def health_status(sock: str, service: str = "") -> int:
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def call(sock: str, timeout: float = 5) -> topology_pb2.MachineInfo:
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        return topology_pb2_grpc.TopologyStub(ch).GetMachineInfo(
            topology_pb2.GetMachineInfoRequest(), timeout=timeout
        )


def start_in_thread(daemon: Daemon) -> threading.Thread:
    thread = threading.Thread(target=daemon.start, daemon=True)
    thread.start()
    return thread


def test_not_serving_and_unavailable_until_components_started(config: Config) -> None:
    component = FakeComponent()
    component.release.clear()
    daemon = Daemon(config, lambda cfg: [component])
    thread = start_in_thread(daemon)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(config.socket) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert health_status(config.socket) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert health_status(config.socket, TOPOLOGY) == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as info:
            call(config.socket)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "starting" in (info.value.details() or "")
        component.release.set()
        thread.join(10)
        assert health_status(config.socket) == health_pb2.HealthCheckResponse.SERVING
        assert health_status(config.socket, TOPOLOGY) == health_pb2.HealthCheckResponse.SERVING
        call(config.socket)
    finally:
        component.release.set()
        daemon.shutdown()
    assert component.stopped
    assert not os.path.exists(config.socket)


def test_errors_map_to_status_codes_and_bugs_to_internal(config: Config) -> None:
    component = FakeComponent()
    daemon = Daemon(config, lambda cfg: [component])
    daemon.start()
    try:

        def not_found() -> topology_pb2.MachineInfo:
            raise NotFoundError("pod 'p1' is not known")

        def persistence() -> topology_pb2.MachineInfo:
            raise PersistenceError("cannot write checkpoint: No space left on device")

        def bug() -> topology_pb2.MachineInfo:
            raise ZeroDivisionError("oops")

        for behave, code, text in (
            (not_found, grpc.StatusCode.NOT_FOUND, "pod 'p1' is not known"),
            (persistence, grpc.StatusCode.UNAVAILABLE, "No space left"),
            (bug, grpc.StatusCode.INTERNAL, "internal error (request id "),
        ):
            component.servicer.behave = behave
            with pytest.raises(grpc.RpcError) as info:
                call(config.socket)
            assert info.value.code() == code
            assert text in (info.value.details() or "")
        # The daemon keeps serving after a handler bug.
        component.servicer.behave = topology_pb2.MachineInfo
        call(config.socket)
        assert health_status(config.socket) == health_pb2.HealthCheckResponse.SERVING
    finally:
        daemon.shutdown()


def test_graceful_shutdown_finishes_in_flight_rpc(config: Config) -> None:
    component = FakeComponent()
    entered = threading.Event()

    def slow() -> topology_pb2.MachineInfo:
        entered.set()
        time.sleep(0.8)
        return topology_pb2.MachineInfo(numa_nodes=[topology_pb2.NUMANode(id=7)])

    component.servicer.behave = slow
    daemon = Daemon(config, lambda cfg: [component])
    daemon.start()
    result: list[object] = []
    caller = threading.Thread(target=lambda: result.append(call(config.socket)))
    caller.start()
    assert entered.wait(5)
    daemon.shutdown()
    caller.join(5)
    assert isinstance(result[0], topology_pb2.MachineInfo)
    assert result[0].numa_nodes[0].id == 7
    assert not os.path.exists(config.socket)


def test_shared_directory_is_refused_unless_allowed(config: Config, short_root: Path) -> None:
    shared = short_root / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cfg = replace(config, state_dir=str(shared))
    daemon = Daemon(cfg, lambda c: [FakeComponent()])
    with pytest.raises(StartupError, match="world-writable") as info:
        daemon.start()
    assert "--allow-shared-dirs" in str(info.value)
    daemon.shutdown()
    daemon = Daemon(replace(cfg, allow_shared_dirs=True), lambda c: [FakeComponent()])
    daemon.start()
    daemon.shutdown()


class FakeContext:
    """Just enough of grpc.ServicerContext for the interceptor's gate."""

    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def time_remaining(self) -> float | None:
        return self.remaining

    def abort_with_status(self, status: grpc.Status) -> None:
        self.aborted = (status.code, status.details)
        self.reason = error_info_reason(status)
        raise RuntimeError("aborted")

    reason = ""


def error_info_reason(status: grpc.Status) -> str:
    """The ErrorInfo reason in a status's grpc-status-details-bin trailer."""
    [(key, value)] = status.trailing_metadata
    assert key == "grpc-status-details-bin"
    detail = status_pb2.Status.FromString(value).details[0]
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    assert info.domain == "numamem.v1"
    return str(info.reason)


def test_expired_deadline_and_undecodable_requests_are_not_worked_on() -> None:
    from numamem.api.interceptors import Readiness, ServerInterceptor, _tolerant

    readiness = Readiness()
    readiness.set_ready()
    gate = ServerInterceptor(readiness)._gate
    expired = FakeContext(0.0)
    with pytest.raises(RuntimeError):
        gate(object(), expired, True)  # type: ignore[arg-type]
    assert expired.aborted is not None and expired.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert expired.reason == "DEADLINE_EXPIRED_IN_QUEUE"
    fine = FakeContext(5.0)
    gate(object(), fine, True)  # type: ignore[arg-type]
    assert fine.aborted is None
    decode = _tolerant(topology_pb2.GetMachineInfoRequest.FromString)
    assert decode is not None
    bad = decode(b"\xff\xff\xff")
    garbled = FakeContext(None)
    with pytest.raises(RuntimeError):
        gate(bad, garbled, False)  # type: ignore[arg-type]
    assert garbled.aborted is not None and garbled.aborted[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert garbled.reason == "UNDECODABLE_REQUEST"


def test_a_refused_start_changes_nothing_on_disk(config: Config, short_root: Path) -> None:
    """The state dir, the lock file and the socket's directories are made by this start and
    removed again when it is refused."""
    component = FakeComponent()
    component.refuse_load = "the checkpoint does not match"
    deep = replace(
        config,
        state_dir=str(short_root / "var" / "lib" / "numamem"),
        socket=str(short_root / "run" / "x" / "n.sock"),
    )
    before = sorted(p.relative_to(short_root) for p in short_root.rglob("*"))
    daemon = Daemon(deep, lambda cfg: [component])
    with pytest.raises(StartupError, match="does not match"):
        daemon.start()
    assert sorted(p.relative_to(short_root) for p in short_root.rglob("*")) == before
    # An existing state dir keeps what it had, and gets no lock file.
    state = short_root / "state"
    state.mkdir(mode=0o700)
    (state / "memory_manager_state").write_text("kept")
    with pytest.raises(StartupError):
        Daemon(config, lambda cfg: [component]).start()
    assert [p.name for p in state.iterdir()] == ["memory_manager_state"]
    assert not (short_root / "run").exists()


def test_unknown_durability_is_not_serving_until_a_later_write_succeeds(config: Config) -> None:
    component = FakeComponent()
    daemon = Daemon(config, lambda cfg: [component])
    daemon.start()
    try:
        assert component.report is not None
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        assert health_status(config.socket) == serving
        component.report("memory_manager_state", "cannot sync the directory: EIO")
        assert health_status(config.socket) == not_serving
        assert health_status(config.socket, TOPOLOGY) == not_serving
        component.report("sys_advisor_state", "cannot sync the directory: EIO")
        component.report("memory_manager_state", None)
        assert health_status(config.socket) == not_serving  # the other file is still unknown
        component.report("sys_advisor_state", None)
        assert health_status(config.socket) == serving
        assert health_status(config.socket, TOPOLOGY) == serving
        call(config.socket)  # RPCs are served throughout: a later write is how it recovers
    finally:
        daemon.shutdown()


def test_health_list_reports_every_service(config: Config) -> None:
    daemon = Daemon(config, lambda cfg: [FakeComponent()])
    daemon.start()
    try:
        with grpc.insecure_channel(f"unix://{config.socket}") as ch:
            listed = health_pb2_grpc.HealthStub(ch).List(health_pb2.HealthListRequest(), timeout=5)
        assert {k: v.status for k, v in listed.statuses.items()} == {
            "": health_pb2.HealthCheckResponse.SERVING,
            TOPOLOGY: health_pb2.HealthCheckResponse.SERVING,
        }
    finally:
        daemon.shutdown()


def test_the_signal_handler_takes_no_lock_and_the_serving_loop_logs_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python signal handler runs on the main thread between two bytecodes, possibly while
    that thread holds the log stream's lock. Before, the SIGTERM handler logged: a SIGTERM
    while the main thread was writing a line (``serve`` releases its held lines right at
    READY=1) hung the daemon for good (seen as a stop that timed out in
    test_systemd_notify). Now the handler only writes a byte to the self-pipe; the serving
    loop wakes and logs."""
    from numamem.api import server

    stream = threading.Lock()  # structlog's per-stream lock, non-reentrant as structlog's is

    class StreamLogger:
        def __init__(self) -> None:
            self.lines: list[tuple[str, dict[str, object]]] = []

        def info(self, event: str, **kw: object) -> None:
            with stream:
                self.lines.append((event, kw))

    log = StreamLogger()
    monkeypatch.setattr(server, "_log", log)
    daemon = Daemon(Config(socket=str(tmp_path / "s.sock"), state_dir=str(tmp_path)), lambda c: [])
    read_end, write_end = os.pipe()
    daemon._wake = (read_end, write_end)
    handled = threading.Event()

    def main_thread_writing_a_line() -> None:
        with stream:
            daemon._on_signal(15, None)
        handled.set()

    threading.Thread(target=main_thread_writing_a_line, daemon=True).start()
    try:
        assert handled.wait(5), "the signal handler waited for a lock its own thread held"
        daemon._serve_until_stopped()  # returns at once: the handler's byte is in the pipe
        assert log.lines == [("signal received, shutting down", {"signal": "SIGTERM"})]
    finally:
        os.close(read_end)
        os.close(write_end)
