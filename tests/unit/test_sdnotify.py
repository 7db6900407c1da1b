"""systemd notifications: sends never block, failures are logged once a minute, WATCHDOG_USEC
and WATCHDOG_PID are parsed strictly and the ping interval is clamped (api/sdnotify.py)."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from numamem.api.sdnotify import WATCHDOG_MAX_S, WATCHDOG_MIN_S, Notifier
from numamem.api.server import Daemon
from numamem.config.model import Config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def deaf_manager(short_root: Path) -> Iterator[str]:
    """A NOTIFY_SOCKET whose service manager never reads: its queue fills up."""
    path = str(short_root / "notify.sock")
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
    rx.bind(path)
    yield path
    rx.close()


def test_a_full_queue_never_blocks_and_is_logged_once_a_minute(deaf_manager: str) -> None:
    """Before: sendto blocked once the queue was full, and SIGTERM never stopped the daemon
    (the serving loop and the shutdown's STOPPING=1 both wait in it)."""
    clock = Clock()
    notifier = Notifier({"NOTIFY_SOCKET": deaf_manager}, clock=clock)
    done = threading.Event()

    def flood() -> None:
        for _ in range(5000):
            notifier.status("x" * 200)
        done.set()

    with capture_logs() as logs:
        threading.Thread(target=flood, daemon=True).start()
        assert done.wait(60), "a notification blocked on the full queue"
        warnings = [e for e in logs if e["log_level"] == "warning"]
        assert len(warnings) == 1
        assert warnings[0]["error"] == "the service manager's queue is full"
        assert "at most once every 60 s" in warnings[0]["event"]
        clock.now += 61
        notifier.watchdog()
        notifier.stopping()
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 2
    assert warnings[1]["lost"] > 1  # every loss since the first line is counted
    notifier.close()


def test_a_notify_socket_that_does_not_exist_is_logged_once_and_ignored() -> None:
    notifier = Notifier({"NOTIFY_SOCKET": "/nonexistent/notify.sock", "WATCHDOG_USEC": "200000"})
    with capture_logs() as logs:
        for _ in range(3):
            notifier.ready("serving")
    assert [e["error"] for e in logs] == ["No such file or directory"]
    assert notifier.watchdog_interval == 0.1
    notifier.close()
    notifier.watchdog()  # after close: nothing, no error


@pytest.mark.parametrize(
    ("usec", "interval", "logged"),
    [
        ("200000", 0.1, None),
        ("30000000", 15.0, None),
        ("1", WATCHDOG_MIN_S, "shorter than numamem pings"),
        ("150000", WATCHDOG_MIN_S, "set WatchdogSec= to at least 0.2s"),
        ("20000000000000000", WATCHDOG_MAX_S, None),  # before: OverflowError in Event.wait
        ("18446744073709551614", WATCHDOG_MAX_S, None),
        ("18446744073709551615", None, "not a number of microseconds"),  # USEC_INFINITY
        ("99999999999999999999", None, "not a number of microseconds"),
        ("0", None, "not a number of microseconds"),
        ("abc", None, "WATCHDOG_USEC 'abc' is not a number"),
        ("-5", None, "not a number of microseconds"),
        ("+5", None, "not a number of microseconds"),
        (" 5", None, "not a number of microseconds"),
        ("1_000", None, "not a number of microseconds"),
        ("²", None, "not a number of microseconds"),  # before: int() raised ValueError
        ("9" * 5000, None, "not a number of microseconds"),  # before: int()'s 4,300 digits
        ("0" * 30 + "1", None, "not a number of microseconds"),  # 21+ digits: never systemd's
        ("", None, None),
    ],
)
def test_watchdog_usec_is_parsed_strictly_and_the_interval_clamped(
    usec: str, interval: float | None, logged: str | None
) -> None:
    with capture_logs() as logs:
        notifier = Notifier({"NOTIFY_SOCKET": "@numamem-test-none", "WATCHDOG_USEC": usec})
    notifier.close()
    assert notifier.watchdog_interval == interval
    if interval is not None:
        assert interval <= threading.TIMEOUT_MAX
    events = [e["event"] for e in logs]
    if logged is None:
        assert events == []
    else:
        [event] = events
        assert logged in event
        assert "WATCHDOG_USEC" in event


@pytest.mark.parametrize(
    ("pid", "pings", "logged"),
    [
        pytest.param(str(os.getpid()), True, False, id="this-process"),  # one id on every worker
        ("1", False, False),  # another process's watchdog
        ("²", False, True),  # before: int() raised ValueError
        ("x1", False, True),
        ("1" * 5000, False, True),  # before: ValueError (int()'s 4,300-digit limit) at start
    ],
)
def test_watchdog_pid(pid: str, pings: bool, logged: bool) -> None:
    env = {"NOTIFY_SOCKET": "@numamem-test-none", "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": pid}
    with capture_logs() as logs:
        notifier = Notifier(env)
    notifier.close()
    assert (notifier.watchdog_interval is not None) == pings
    assert any("WATCHDOG_PID" in e["event"] for e in logs) == logged


def test_the_serving_loop_accepts_the_longest_interval(short_root: Path) -> None:
    """A WATCHDOG_USEC above threading.TIMEOUT_MAX made the serving loop's wait raise
    OverflowError after the daemon had started serving."""
    notifier = Notifier({"NOTIFY_SOCKET": "@numamem-test-none", "WATCHDOG_USEC": "9" * 19})
    daemon = Daemon(Config(), lambda cfg: [], notifier=notifier)
    read_end, write_end = os.pipe()
    daemon._wake = (read_end, write_end)  # as run() sets it up
    stopper = threading.Timer(0.2, daemon._on_signal, args=(signal.SIGTERM, None))
    stopper.start()
    try:
        daemon._serve_until_stopped()
    finally:
        stopper.cancel()
        notifier.close()
        os.close(read_end)
        os.close(write_end)
