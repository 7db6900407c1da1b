"""systemd's notification protocol (sd_notify(3)) for ``Type=notify`` units, without libsystemd.

The service manager passes ``NOTIFY_SOCKET``: a unix datagram socket path, or an abstract
socket name written with a leading ``@``. Each notification is one datagram of
newline-separated ``KEY=VALUE`` lines. numamem sends:

* ``STATUS=...`` while it starts (what it is restoring), once serving, while it is not
  serving (why), and when a start is refused (``systemctl status`` shows the last one);
* ``READY=1`` the first time health reports SERVING (``Before=kubelet.service`` then
  waits for it), which is later than the end of the start while a checkpoint's
  durability is unknown;
* ``STOPPING=1`` when the shutdown begins;
* ``WATCHDOG=1`` every half ``WATCHDOG_USEC`` from the serving loop, when the service
  manager asks for it (``WatchdogSec=``) and ``WATCHDOG_PID``, if set, is this process,
  and only after a liveness probe succeeded within that half period: a task on the RPC
  worker pool that takes the memory manager's and the metacache's writer locks and
  finds no metacache commit round running longer (:mod:`numamem.api.watchdog`). A
  saturated pool, a lock held longer or such a commit sends no ping
  (logged, naming what is stuck), so systemd restarts a wedged daemon once
  ``WatchdogSec=`` passes (``Restart=on-failure``; the unit's ``WatchdogSec=30s`` gives a
  probe 15 s). Pings start after ``READY=1``: a long restore is not cut short.
  The interval is kept within :data:`WATCHDOG_MIN_S` and :data:`WATCHDOG_MAX_S`: a
  ``WatchdogSec=`` under 0.2 s cannot be met (and is logged), pinging more often than
  half a longer timeout is harmless. A ``WATCHDOG_USEC`` or ``WATCHDOG_PID`` that is not
  a number of at most 20 digits (``WATCHDOG_USEC`` 0 and 2^64-1 are systemd's "unset" too)
  is logged once and ignored: no pings.

Without ``NOTIFY_SOCKET`` every call does nothing. Sends never block (``MSG_DONTWAIT``): a
service manager whose queue is full, a socket that does not exist or any other error of
the send loses that notification, is logged at most once every :data:`WARN_EVERY_S`
seconds (with the number lost since the last line), and never stops the daemon, its
start or its shutdown. Thread-safe (one ``sendto`` per notification).
"""

from __future__ import annotations

import errno
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping

from numamem.errors import quote
from numamem.logging import get_logger

_log = get_logger("systemd")

WATCHDOG_MIN_S = 0.1
"""The shortest time between two ``WATCHDOG=1`` pings (a ``WatchdogSec=`` of 0.2 s)."""
WATCHDOG_MAX_S = 3600.0
"""The longest time between two pings (far below ``threading.TIMEOUT_MAX``)."""
WARN_EVERY_S = 60.0
"""At most one log line about failed notifications per this many seconds."""
USEC_INFINITY = 2**64 - 1
"""systemd's ``USEC_INFINITY``: like 0, "no watchdog"."""
_DIGITS = re.compile(r"[0-9]{1,20}")
"""A decimal of at most 20 digits (2^64-1 has 20): a longer one is refused like any value
that does not parse, before ``int()`` (which raises ValueError past 4,300 digits)."""


class Notifier:
    """The notifications of one process, addressed from its environment."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self._path = path
        self._address = "\0" + path[1:] if path.startswith("@") else path
        self._socket: socket.socket | None = None
        if self._address:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._socket.setblocking(False)
        self._clock = clock
        self._lock = threading.Lock()
        self._warned_at: float | None = None
        self._lost = 0
        self.watchdog_interval: float | None = None
        """Seconds between ``WATCHDOG=1`` pings (half the service manager's timeout, within
        :data:`WATCHDOG_MIN_S` .. :data:`WATCHDOG_MAX_S`), or None."""
        if self._socket is not None:
            self.watchdog_interval = watchdog_interval(
                env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", ""), os.getpid()
            )

    def notify(self, *lines: str) -> None:
        """Send one notification of ``KEY=VALUE`` lines (a value holds no newline); never
        blocks, never raises."""
        sock = self._socket
        if sock is None:
            return
        data = "\n".join(line.replace("\n", " ") for line in lines).encode()
        try:
            sock.sendto(data, socket.MSG_DONTWAIT, self._address)
        except OSError as err:
            self._failed(err)

    def _failed(self, err: OSError) -> None:
        with self._lock:
            self._lost += 1
            now = self._clock()
            if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
                return
            self._warned_at, lost, self._lost = now, self._lost, 0
        why = (
            "the service manager's queue is full"
            if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
            else err.strerror or type(err).__name__
        )
        _log.warning(
            "cannot notify the service manager (NOTIFY_SOCKET); carrying on without it, "
            f"logged at most once every {WARN_EVERY_S:.0f} s",
            socket=quote(self._path, style="bare"),
            error=why,
            lost=lost,
        )

    def status(self, text: str) -> None:
        self.notify(f"STATUS={text}")

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}")

    def stopping(self) -> None:
        self.notify("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> None:
        self.notify("WATCHDOG=1")

    def close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()


def watchdog_interval(usec: str, pid: str, own_pid: int) -> float | None:
    """The seconds between pings for ``WATCHDOG_USEC``/``WATCHDOG_PID`` (empty: unset), or
    None: no watchdog, another process's, or a value that does not parse (logged)."""
    if not usec:
        return None
    if pid:
        if not _DIGITS.fullmatch(pid):
            _log.warning(
                f"WATCHDOG_PID {quote(pid)} is not a process id; not pinging the watchdog "
                "(the service manager sets it, or leave it unset)"
            )
            return None
        if int(pid) != own_pid:
            return None
    value = int(usec) if _DIGITS.fullmatch(usec) else None
    if value is None or value == 0 or value >= USEC_INFINITY:
        _log.warning(
            f"WATCHDOG_USEC {quote(usec)} is not a number of microseconds from 1 to "
            f"{USEC_INFINITY - 1}; not pinging the watchdog (set WatchdogSec= in the unit)"
        )
        return None
    seconds = value / 2e6
    if seconds < WATCHDOG_MIN_S:
        _log.warning(
            f"WATCHDOG_USEC {value} (WatchdogSec={value / 1e6:g}s) is shorter than numamem "
            f"pings: every {WATCHDOG_MIN_S:g} s; set WatchdogSec= to at least "
            f"{2 * WATCHDOG_MIN_S:g}s"
        )
    return min(max(seconds, WATCHDOG_MIN_S), WATCHDOG_MAX_S)
