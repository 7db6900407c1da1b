"""systemd's notification protocol (sd_notify(3)) for ``Type=notify`` units, without libsystemd.

The service manager passes ``NOTIFY_SOCKET``: a unix datagram socket path, or an abstract
socket name written with a leading ``@``. Each notification is one datagram of
newline-separated ``KEY=VALUE`` lines. numamem sends:

* ``STATUS=...`` while it starts (what it is restoring), once serving, and when a start
  is refused (``systemctl status`` shows the last one);
* ``READY=1`` once health reports SERVING (``Before=kubelet.service`` then waits for it);
* ``STOPPING=1`` when the shutdown begins;
* ``WATCHDOG=1`` every half ``WATCHDOG_USEC`` from the serving loop, when the service
  manager asks for it (``WatchdogSec=``) and ``WATCHDOG_PID``, if set, is this process.

Without ``NOTIFY_SOCKET`` every call does nothing. A failed send is logged once and
otherwise ignored, as sd_notify's callers do: notifications never stop the daemon.
Thread-safe (one ``sendto`` per notification).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping

from numamem.logging import get_logger

_log = get_logger("systemd")


class Notifier:
    """The notifications of one process, addressed from its environment."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self._path = path
        self._address = "\0" + path[1:] if path.startswith("@") else path
        self._socket: socket.socket | None = None
        if self._address:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._warned = False
        self._lock = threading.Lock()
        self.watchdog_interval: float | None = None
        """Seconds between ``WATCHDOG=1`` pings (half the service manager's timeout), or None."""
        usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
        ours = not pid or (pid.isdigit() and int(pid) == os.getpid())
        if self._socket is not None and usec.isdigit() and int(usec) > 0 and ours:
            self.watchdog_interval = int(usec) / 2e6

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    def notify(self, *lines: str) -> None:
        """Send one notification of ``KEY=VALUE`` lines (a value holds no newline)."""
        if self._socket is None:
            return
        data = "\n".join(line.replace("\n", " ") for line in lines).encode()
        try:
            self._socket.sendto(data, self._address)
        except OSError as err:
            with self._lock:
                first, self._warned = not self._warned, True
            if first:
                _log.warning(
                    "cannot notify the service manager (NOTIFY_SOCKET); carrying on without",
                    socket=self._path,
                    error=err.strerror,
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
        if self._socket is not None:
            self._socket.close()
            self._socket = None
