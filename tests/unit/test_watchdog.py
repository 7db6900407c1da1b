"""Issue 38: ``WATCHDOG=1`` only after a liveness probe through the RPC worker pool, the
components' writer locks and a Health/Check over the socket succeeded (api/watchdog.py). A wedged writer lock, a disk write
that hangs outside the lock (the metacache's group commit) and a saturated pool stop the
pings (and say what is stuck); a healthy daemon keeps pinging."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from numamem import logging as nlog
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.api.reach import health_check_over
from numamem.api.sdnotify import Notifier
from numamem.api.server import Daemon
from numamem.api.watchdog import Watchdog
from numamem.testing.daemon import short_tmpdir
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.v1 import metacache_pb2 as mc

INTERVAL = 0.05
"""Short, so that a probe blocked on a held lock gives up soon (no assertion is timed)."""
PATIENCE = 30.0
"""Only a bound on how long a test waits for what must happen; never asserted."""


class Loop:
    """The serving loop's part: tick, then sleep until the probe wakes it or the timeout."""

    def __init__(
        self,
        locks: list[tuple[str, threading.Lock]],
        pool: futures.Executor,
        writes: Sequence[tuple[str, Callable[[], float]]] = (),
        stepped: bool = False,
    ) -> None:
        self.woke = threading.Event()
        self.pinged = 0
        self.now = 0.0
        self.stepped = stepped
        """A clock of the loop's own: time passes only when the loop would sleep with no
        probe in flight, so how long a probe takes on a busy machine does not count."""
        self.watchdog = Watchdog(
            self.ping,
            INTERVAL,
            pool.submit,
            lambda: locks,
            self.woke.set,
            writes=lambda: writes,
            pool_state=lambda: "x",
            **({"clock": lambda: self.now} if stepped else {}),
        )

    def ping(self) -> None:
        self.pinged += 1

    def until(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + PATIENCE
        while not done():
            assert time.monotonic() < deadline, "the watchdog never got there"
            delay = self.watchdog.tick()
            if not self.stepped:
                self.woke.wait(delay)
            elif self.watchdog._probe is not None:  # in flight: wait for it, however long
                self.woke.wait(deadline - time.monotonic())
            else:
                self.now += delay
            self.woke.clear()


@pytest.fixture
def pool() -> Iterator[futures.ThreadPoolExecutor]:
    executor = futures.ThreadPoolExecutor(max_workers=2)
    yield executor
    executor.shutdown(wait=True)


@contextlib.contextmanager
def info_logs() -> Iterator[list[dict[str, object]]]:
    nlog.configure("info", "console", cache=False)
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        nlog.configure("warning", "console", cache=False)  # as tests/conftest.py has it


def warnings(logs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in logs if str(e["event"]).startswith("liveness probe failed")]


def test_a_healthy_daemon_keeps_pinging(pool: futures.ThreadPoolExecutor) -> None:
    """On the loop's own clock: with the machine's, a probe the scheduler delayed past the
    50 ms interval on a busy machine counted as a failure (and the test failed)."""
    locks = [("memory manager", threading.Lock()), ("metacache", threading.Lock())]
    loop = Loop(locks, pool, stepped=True)
    with capture_logs() as logs:
        loop.until(lambda: loop.pinged >= 5)
    assert loop.watchdog.failures == 0
    assert warnings(logs) == []


def test_a_wedged_writer_lock_stops_the_pings_and_is_named(
    pool: futures.ThreadPoolExecutor,
) -> None:
    wedged = threading.Lock()
    loop = Loop([("memory manager", threading.Lock()), ("metacache", wedged)], pool)
    loop.until(lambda: loop.pinged >= 1)
    with info_logs() as logs:
        assert wedged.acquire()
        try:
            stuck_from = loop.watchdog.failures
            loop.until(lambda: loop.watchdog.failures >= stuck_from + 1)
            pinged = loop.pinged  # a probe that passed before the lock was taken may ping once
            loop.until(lambda: loop.watchdog.failures >= stuck_from + 4)
            assert loop.pinged == pinged  # no ping while the lock is held
        finally:
            wedged.release()
        loop.until(lambda: loop.pinged > pinged)  # pings resume
    [warning] = warnings(logs)  # once, not once per probe (rate-limited)
    assert str(warning["stuck"]).startswith("the metacache writer lock is held: the probe ")
    assert [e["event"] for e in logs if e["log_level"] == "info"] == [
        "liveness probe succeeded again: pinging the watchdog"
    ]


def test_a_disk_write_running_past_the_interval_stops_the_pings_and_is_named(
    pool: futures.ThreadPoolExecutor,
) -> None:
    """Review of issue 38: the metacache's commit writes with no lock held, so a hung fsync
    there leaves every writer lock free; the write's age is what the probe must look at.
    On the loop's own clock: with the machine's, a worker the scheduler started late made
    the one warning 'the RPC worker pool is saturated' instead of the disk write's."""
    running = [0.0]
    loop = Loop(
        [("metacache", threading.Lock())],
        pool,
        [("metacache", lambda: running[0])],
        stepped=True,
    )
    running[0] = INTERVAL / 2  # a commit in progress, younger than the interval: fine
    loop.until(lambda: loop.pinged >= 2)
    with capture_logs() as logs:
        running[0] = 2.5  # a round that has run 2.5 s: every metacache write waits for it
        stuck_from = loop.watchdog.failures
        loop.until(lambda: loop.watchdog.failures >= stuck_from + 1)
        pinged = loop.pinged  # a probe that passed before may ping once
        loop.until(lambda: loop.watchdog.failures >= stuck_from + 4)
        assert loop.pinged == pinged
        running[0] = 0.0  # the round ended
        loop.until(lambda: loop.pinged > pinged)
    [warning] = warnings(logs)
    assert warning["stuck"] == (
        f"the metacache disk write has run for 2.5 s, more than the {INTERVAL:g} s between "
        "pings: every metacache write waits for it"
    )


def test_a_saturated_worker_pool_stops_the_pings_and_is_named() -> None:
    pool = futures.ThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    loop = Loop([("memory manager", threading.Lock())], pool)
    try:
        loop.until(lambda: loop.pinged >= 1)
        with capture_logs() as logs:
            busy = pool.submit(release.wait)  # every worker is taken
            stuck_from = loop.watchdog.stuck_ticks
            loop.until(lambda: loop.watchdog.stuck_ticks >= stuck_from + 1)
            pinged = loop.pinged
            # The deadline passes again and again: still no ping, and one probe in flight.
            loop.until(lambda: loop.watchdog.stuck_ticks >= stuck_from + 5)
            assert loop.pinged == pinged
            assert loop.watchdog.failures == 1
            release.set()
            busy.result(PATIENCE)
            loop.until(lambda: loop.pinged > pinged)
        [warning] = warnings(logs)
        assert str(warning["stuck"]).startswith(
            "the RPC worker pool is saturated: the probe has waited"
        )
        assert str(warning["stuck"]).endswith("for a worker (x)")
    finally:
        release.set()
        pool.shutdown(wait=True)


def test_at_most_one_probe_is_in_flight(pool: futures.ThreadPoolExecutor) -> None:
    """A stuck probe is not joined by another each interval (that would fill the pool)."""
    submitted: list[Callable[[], None]] = []
    now = [0.0]
    watchdog = Watchdog(
        lambda: None,
        1.0,
        submitted.append,
        lambda: [],
        lambda: None,
        clock=lambda: now[0],
    )
    for step in range(10):
        now[0] = step * 0.7
        watchdog.tick()
    assert len(submitted) == 1
    assert watchdog.failures == 1


# --- through the daemon: its real components, pool and serving loop ---


@pytest.fixture
def served() -> Iterator[InProcessServer]:
    root = short_tmpdir()
    try:
        with serve_in_process(root=root, workers=2) as server:
            yield server
    finally:
        shutil.rmtree(root, ignore_errors=True)


class ServingLoop:
    """The daemon's own serving loop on a thread, pinging a datagram socket of the test."""

    def __init__(self, daemon: Daemon, root: Path) -> None:
        self.daemon = daemon
        self.rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path = str(root / "notify.sock")
        self.rx.bind(path)
        self.rx.setblocking(False)
        daemon.notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"})
        self.pipe = os.pipe()
        os.set_blocking(self.pipe[1], False)
        daemon._wake = self.pipe
        self.thread = threading.Thread(target=daemon._serve_until_stopped, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + PATIENCE
        while daemon.watchdog is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        self.watchdog = daemon.watchdog

    def pings(self) -> int:
        """Datagrams received since the last call (each is one WATCHDOG=1)."""
        count = 0
        while True:
            try:
                assert self.rx.recv(64) == b"WATCHDOG=1"
            except BlockingIOError:
                return count
            count += 1

    def wait(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + PATIENCE
        while not done():
            assert time.monotonic() < deadline, "the serving loop never got there"
            time.sleep(0.01)

    def stop(self) -> None:
        self.daemon._on_signal(signal.SIGTERM, None)
        self.thread.join(PATIENCE)
        self.daemon.notifier.close()
        self.daemon._wake = None
        for fd in self.pipe:
            os.close(fd)
        self.rx.close()


@pytest.mark.parametrize("kind", [MemoryManagerComponent, MetaCacheComponent])
def test_the_daemon_stops_pinging_while_a_writer_lock_is_wedged(
    served: InProcessServer, kind: type[MemoryManagerComponent | MetaCacheComponent]
) -> None:
    [(name, lock)] = served.component(kind).liveness_locks()
    loop = ServingLoop(served.daemon, served.root)
    try:
        loop.wait(lambda: loop.watchdog.pings >= 2)
        assert loop.pings() >= 1
        with capture_logs() as logs:
            assert lock.acquire()
            try:
                loop.wait(lambda: loop.watchdog.failures >= 1)
                loop.pings()  # a probe that passed before the lock was taken may ping once
                loop.wait(lambda: loop.watchdog.failures >= 4)
                assert loop.pings() == 0
            finally:
                lock.release()
            before = loop.watchdog.pings
            loop.wait(lambda: loop.watchdog.pings > before)
            assert loop.pings() >= 1
        [warning] = warnings(logs)
        assert str(warning["stuck"]).startswith(f"the {name} writer lock is held: the probe ")
    finally:
        loop.stop()


def test_the_daemon_stops_pinging_while_a_metacache_commit_is_wedged(
    served: InProcessServer,
) -> None:
    """Review of issue 38: a metacache write waits for its group commit's disk write, which
    runs outside the writer lock. A persister whose save never returns (a hung fsync) must
    stop the pings although every lock the probe takes is free."""
    metacache = served.component(MetaCacheComponent)
    persister = metacache.persister
    assert persister is not None
    wedged, entered = threading.Event(), threading.Event()
    real_save = persister.save

    def hung_fsync(*args: object, **kwargs: object) -> object:
        entered.set()
        wedged.wait()  # a disk that does not answer
        return real_save(*args, **kwargs)

    persister.save = hung_fsync
    loop = ServingLoop(served.daemon, served.root)
    loop.watchdog._warn_every = 0  # every stuck tick says why: a late worker's may come first
    errors: list[grpc.StatusCode] = []

    def write() -> None:
        try:
            served.client.set_pool_info(mc.PoolInfo(pool_name="share"))
        except grpc.RpcError as err:
            errors.append(err.code())

    writer = threading.Thread(target=write, daemon=True)
    try:
        loop.wait(lambda: loop.watchdog.pings >= 1)
        with capture_logs() as logs:
            writer.start()
            assert entered.wait(PATIENCE)  # the write is wedged in its commit
            loop.wait(lambda: loop.watchdog.failures >= 1)
            loop.pings()  # probes that passed while the round was young may have pinged
            loop.wait(lambda: loop.watchdog.failures >= 4)
            assert writer.is_alive()  # still wedged
            assert loop.pings() == 0
            wedged.set()
            writer.join(PATIENCE)
            before = loop.watchdog.pings
            loop.wait(lambda: loop.watchdog.pings > before)  # pings resume
        assert errors == []  # the write was acknowledged once the disk answered
        assert any(
            str(warning["stuck"]).startswith("the metacache disk write has run for ")
            for warning in warnings(logs)
        ), warnings(logs)
    finally:
        wedged.set()
        writer.join(PATIENCE)
        loop.stop()


def test_the_daemon_stops_pinging_while_its_rpc_pool_is_saturated(
    served: InProcessServer,
) -> None:
    pool = served.daemon._pool
    assert pool is not None
    loop = ServingLoop(served.daemon, served.root)
    release = threading.Event()
    try:
        loop.wait(lambda: loop.watchdog.pings >= 1)
        with capture_logs() as logs:
            blockers = [pool.submit(release.wait) for _ in range(served.config.workers)]
            loop.wait(lambda: loop.watchdog.stuck_ticks >= 1)
            loop.pings()  # a probe that passed before the pool filled may ping once
            before = loop.watchdog.pings
            loop.wait(lambda: loop.watchdog.stuck_ticks >= 5)
            assert loop.pings() == 0 and loop.watchdog.pings == before
            release.set()
            for blocker in blockers:
                blocker.result(PATIENCE)
            loop.wait(lambda: loop.watchdog.pings > before)
            assert loop.pings() >= 1
        [warning] = warnings(logs)
        assert "the RPC worker pool is saturated" in str(warning["stuck"])
        assert "RPCs running or queued on 2 workers" in str(warning["stuck"])
    finally:
        release.set()
        loop.stop()


def test_the_daemon_stops_pinging_when_its_socket_cannot_be_reached(
    served: InProcessServer,
) -> None:
    """Review 38b: the probe went straight to the pool and the locks, never through the
    socket: with the socket file removed (an operator's rm, tmpfiles cleaning /run) every
    new client got ENOENT and WATCHDOG=1 kept coming, so systemd never restarted the
    daemon. The probe ends with a Health/Check over the socket's path."""
    loop = ServingLoop(served.daemon, served.root)
    loop.watchdog._warn_every = 0  # every stuck tick says why: a late worker's may come first
    try:
        loop.wait(lambda: loop.watchdog.pings >= 2)
        with capture_logs() as logs:
            os.unlink(served.socket)
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with contextlib.closing(probe):  # what every new client gets
                assert probe.connect_ex(served.socket) == errno.ENOENT
            loop.wait(lambda: loop.watchdog.failures >= 1)
            loop.pings()  # a probe that passed before the unlink may ping once
            loop.wait(lambda: loop.watchdog.failures >= 4)
            assert loop.pings() == 0
        unreachable = (
            f"a Health/Check over --socket '{served.socket}' failed (UNAVAILABLE): new "
            "clients cannot reach the daemon"
        )
        assert any(warning["stuck"] == unreachable for warning in warnings(logs)), warnings(logs)
    finally:
        loop.stop()


def test_reach_is_a_new_connection_by_the_path(served: InProcessServer) -> None:
    reach = health_check_over(served.socket)
    assert reach(PATIENCE) == ""
    assert reach(0.0) == f"no time was left to reach --socket '{served.socket}'"
    moved = served.socket + ".moved"
    os.rename(served.socket, moved)  # the listener keeps its socket: only the path is gone
    try:
        assert "failed (UNAVAILABLE)" in reach(PATIENCE)
    finally:
        os.rename(moved, served.socket)
    assert reach(PATIENCE) == ""
