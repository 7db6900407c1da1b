"""``numamem nri``'s status socket: what the plugin is doing, one JSON line per connection.

A probe (``numamem nri-status``, the DaemonSet's startup and liveness probes) connects to the
unix socket given by ``numamem nri --status-socket``, reads one line and the server closes
the connection; nothing is read from the client. The line is :meth:`Plugin.status
<numamem.nri.plugin.Plugin.status>` (``registered``, ``sessions``, ``last_error``, the
runtime) with the handler's own (whether the daemon answers, the counts). It is answered by
a thread of its own that takes no lock the plugin's handlers hold for long, so a probe sees a
plugin busy with the runtime as it is, and a frozen process fails it by timeout.

The socket file is made when :meth:`StatusServer.start` binds it (mode 0660) and removed by
:meth:`StatusServer.stop` if it is still this server's. A socket left by a plugin that died
is replaced; one a live plugin answers on is refused (two plugins would report for each
other).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

from numamem.errors import ConfigError, quote
from numamem.logging import get_logger
from numamem.socketpath import prepare_socket_path

_log = get_logger("nri")

SEND_TIMEOUT = 1.0
"""Seconds a client may take to receive its line before the server gives up on it."""


class StatusServer:
    """Serves ``report()`` as one JSON line per connection on ``path``. Thread-safe."""

    def __init__(self, path: str, report: Callable[[], Mapping[str, Any]]) -> None:
        self.path = path
        self._report = report
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._inode: int | None = None

    def start(self) -> None:
        """Bind and serve. ``StartupError`` naming the path when something other than a
        dead socket is there (a live plugin, a socket in doubt, a file that is not a socket:
        nothing is deleted but a dead socket, see :mod:`numamem.socketpath`); ``ConfigError``
        when it cannot be bound."""
        prepare_socket_path(self.path, "--status-socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path)
            os.chmod(self.path, 0o660)
            listener.listen(8)
        except OSError as err:
            listener.close()
            raise ConfigError(
                f"--status-socket {quote(self.path, style='bare')}: cannot serve on it: "
                f"{err.strerror or err}; is its directory there and writable?"
            ) from None
        self._inode = os.stat(self.path).st_ino
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, name="nri-status", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and remove the socket file if it is still this server's."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        if self._thread is not None:
            self._thread.join(5)
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)

    def line(self) -> bytes:
        """The status as it is now: one JSON object and a newline."""
        return (json.dumps(dict(self._report()), sort_keys=True) + "\n").encode()

    def _serve(self) -> None:
        while True:
            listener = self._listener
            if listener is None:
                return
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            with conn:
                try:
                    conn.settimeout(SEND_TIMEOUT)
                    conn.sendall(self.line())
                except Exception as err:  # noqa: BLE001 - a client or a report must not end it
                    _log.debug("NRI status not sent", error=str(err))
