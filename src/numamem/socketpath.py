"""Making a unix socket path free without deleting anything that may be alive.

:func:`prepare_socket_path` deletes a socket file only when a test ``connect()`` gets
``ECONNREFUSED`` (nobody listens: what a crash leaves). Any other failure is no proof of
death: ``EAGAIN`` is a live listener whose accept backlog is full (a process busy or
stalled), ``EACCES`` a socket this user may not use, a timeout a stalled peer. The start
is then refused (``StartupError``), naming the errno, the path and what to do; nothing is
deleted. A path that is not a socket is never deleted either.

Used by the daemon's sockets (:mod:`numamem.api.sockets`, which binds them) and by
``numamem nri``'s status socket: below both, standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat

from numamem.errors import PATH_QUOTE_BYTES, StartupError, quote
from numamem.logging import get_logger

_log = get_logger("server")

MAX_SOCKET_PATH = 107
PROBE_TIMEOUT_S = 1.0
"""How long the test connect() of :func:`prepare_socket_path` may take."""


def check_socket_path(path: str, flag: str = "--socket") -> None:
    """Refuse a socket path longer than the kernel accepts (before anything is created)."""
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise StartupError(
            f"{flag} {quote(path, limit=PATH_QUOTE_BYTES)} is {len(path.encode())} bytes long; unix socket paths are limited "
            f"to {MAX_SOCKET_PATH}: choose a shorter path"
        )


def classify_socket_path(path: str, flag: str = "--socket") -> os.stat_result | None:
    """What is at ``path``, without changing anything: None when it is free (missing, or
    gone since it was looked at), the ``lstat`` of a stale socket (a test ``connect()`` got
    ``ECONNREFUSED``: nobody listens) that a start removes; refuses (``StartupError``) a
    path that is too long, is not a socket, is served by a live process or is in doubt
    (see the module docstring). ``flag`` names the option, for the messages."""
    check_socket_path(path, flag)
    shown = quote(path, limit=PATH_QUOTE_BYTES)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        raise StartupError(
            f"{flag} {shown} exists and is not a socket; numamem never deletes it: "
            f"remove it yourself or choose another {flag}"
        )
    failure = probe_connect(path)
    if failure is None:
        raise StartupError(
            f"{flag} {shown} is served by another live process; stop it or choose another {flag}"
        )
    if failure.errno == errno.ENOENT:
        return None  # gone since the lstat: free
    if failure.errno != errno.ECONNREFUSED:
        raise StartupError(in_doubt(path, flag, failure))
    return st


def prepare_socket_path(path: str, flag: str = "--socket") -> None:
    """Make ``path`` free for binding, or refuse as :func:`classify_socket_path` does;
    deletes nothing but the stale socket it found, and only while the path is still that
    socket (see the module docstring)."""
    st = classify_socket_path(path, flag)
    if st is None:
        return
    with contextlib.suppress(FileNotFoundError):
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise StartupError(
                f"{flag} {quote(path, limit=PATH_QUOTE_BYTES)}: replaced by another process "
                f"while numamem was starting; stop it or choose another {flag}"
            )
        os.unlink(path)
        _log.warning("removed stale socket left by an earlier run", socket=path)


def probe_connect(path: str, timeout: float = PROBE_TIMEOUT_S) -> OSError | None:
    """A test connect() to the socket at ``path``: None when something accepted it, else why
    not (a timeout is an ``OSError`` with errno ``ETIMEDOUT``)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    probe.settimeout(timeout)
    try:
        probe.connect(path)
    except TimeoutError as err:
        return err if err.errno is not None else TimeoutError(errno.ETIMEDOUT, "timed out")
    except OSError as err:
        return err
    finally:
        probe.close()
    return None


def in_doubt(path: str, flag: str, failure: OSError) -> str:
    """The refusal for a socket that neither accepts nor refuses a connection."""
    code = failure.errno
    name = errno.errorcode.get(code, str(code)) if code is not None else "an error"
    reason = (failure.strerror or str(failure)).lower()
    why = {
        errno.EAGAIN: "its accept backlog is full: a live process listens but does not accept "
        "now (busy or stalled)",
        errno.ETIMEDOUT: "a live process may listen but did not answer in time (stalled?)",
        errno.EACCES: f"this user (uid {os.geteuid()}) may not connect to it: another user's "
        "process may serve it",
        errno.EPERM: f"this user (uid {os.geteuid()}) may not connect to it",
    }.get(code or 0, "it may still be served")
    return (
        f"{flag} {quote(path, limit=PATH_QUOTE_BYTES)}: a test connection to the socket there "
        f"failed with {name} ({reason}): {why}. numamem deletes a socket only when the "
        f"connection is refused (ECONNREFUSED: nobody listens), so it did not start: stop the "
        f"process that serves it, remove the socket yourself if nothing does, or choose "
        f"another {flag}"
    )
