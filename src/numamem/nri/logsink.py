"""Where ``numamem nri`` logs: stderr, a file, or the host's syslog.

containerd starts a pre-launched plugin with stdin, stdout and stderr on ``/dev/null``
(measured on 1.7.24 and 2.1.9), so a pre-launched plugin that logged to stderr would lose every
refusal, problem and count. ``--log-file`` (config key ``log-file``) says where the log goes:

* ``-``: stderr (the default of an external plugin: its container's log);
* ``syslog``: the host's syslog socket ``/dev/log`` (journald on a systemd host:
  ``journalctl -t numamem-nri``), one datagram a line, facility daemon; the default of a
  pre-launched plugin where ``/dev/log`` exists;
* any other value: a file, appended to (made with mode 0640 if missing; its directory must
  exist); :data:`PRELAUNCHED_FILE` is the default of a pre-launched plugin on a host without
  ``/dev/log``. A pre-launched plugin's stdout and stderr are pointed at the file too, so
  that what Python itself prints (a crash) lands beside the log.

``$NUMAMEM_NRI_LOG_FILE`` overrides the defaults (the runtime passes no argument to a
pre-launched plugin; tests set it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Mapping
from typing import TextIO

from numamem.errors import ConfigError, quote

STDERR = "-"
SYSLOG = "syslog"
DEV_LOG = "/dev/log"
IDENT = "numamem-nri"
_DAEMON_INFO = (3 << 3) | 6
"""Syslog priority: facility daemon (3), severity info (6); the level is in the line."""
MAX_DATAGRAM = 8192


PRELAUNCHED_FILE = "/var/log/numamem-nri.log"
ENV_LOG_FILE = "NUMAMEM_NRI_LOG_FILE"


def default_log_file(
    prelaunched: bool, environ: Mapping[str, str] | None = None, dev_log: str = DEV_LOG
) -> str:
    """The default ``--log-file`` (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_LOG_FILE):
        return env[ENV_LOG_FILE]
    if not prelaunched:
        return STDERR
    return SYSLOG if os.path.exists(dev_log) else PRELAUNCHED_FILE


def point_stdio_at(stream: TextIO) -> None:
    """Make fds 1 and 2 the log file's (a pre-launched plugin's are /dev/null)."""
    if isinstance(stream, SyslogStream) or stream in (sys.stderr, sys.stdout):
        return
    fd = stream.fileno()
    for target in (1, 2):
        os.dup2(fd, target)


class SyslogStream:
    """A text stream whose lines go to the syslog socket at ``path`` as datagrams.
    Thread-safe. A line the socket does not take is dropped (a log must not stop the
    plugin)."""

    def __init__(self, path: str = DEV_LOG) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.connect(path)
        except OSError as err:
            self._sock.close()
            raise ConfigError(
                f"log-file syslog: cannot reach the syslog socket {quote(path, style='bare')}: "
                f"{err.strerror or err}; give a file instead"
            ) from None
        self._lock = threading.Lock()
        self._partial = ""

    def write(self, text: str) -> int:
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            for line in lines:
                data = f"<{_DAEMON_INFO}>{IDENT}[{os.getpid()}]: {line}".encode()
                with contextlib.suppress(OSError):
                    self._sock.send(data[:MAX_DATAGRAM])
        return len(text)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self._sock.close()


def open_log(target: str, stderr: TextIO) -> TextIO:
    """The stream for ``--log-file`` ``target``; ``ConfigError`` naming it when it cannot be
    opened."""
    if target in ("", STDERR):
        return stderr
    if target == SYSLOG:
        return SyslogStream()  # type: ignore[return-value]
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    except OSError as err:
        raise ConfigError(
            f"log-file {quote(target, style='bare')}: cannot open it for appending: "
            f"{err.strerror or err}; is its directory there and writable?"
        ) from None
    return os.fdopen(fd, "a", buffering=1, encoding="utf-8", errors="replace")
