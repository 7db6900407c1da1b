"""The daemon's unix socket paths: made free, bound, removed; another process's only in a
narrow race at shutdown (below).

* :func:`~numamem.socketpath.prepare_socket_path` deletes a socket file only when a test ``connect()`` gets
  ``ECONNREFUSED`` (nobody listens: what a crash leaves). Any other failure is no proof
  of death: ``EAGAIN`` is a live listener whose accept backlog is full (a daemon busy or
  stalled), ``EACCES`` a socket this user may not use, a timeout a stalled peer. The
  start is then refused, naming the errno, the path and what to do; nothing is deleted.
  A path that is not a socket is never deleted either.
* :func:`bind_unix_socket` binds a gRPC server at a private temporary name in the same
  directory (created 0660 under a umask, then ``chmod``), then ``link()`` s it onto the
  final path (which fails, and refuses the start, if another process created the path
  meanwhile: no socket is ever replaced) and removes the temporary name. On a file system
  without hard links it renames instead with ``renameat2(RENAME_NOREPLACE)``, which
  fails as ``link()`` does when the path exists; where that is not available (a C
  library without ``renameat2``, a file system without the flag) the start is refused
  rather than risk renaming over a socket that appeared meanwhile. grpcio unlinks
  the path *it* bound when the server stops, whatever file is there by then (tested in
  tests/unit/test_sockets.py); binding at the temporary name makes that unlink hit a
  name that no longer exists, so a newcomer's socket at the final path survives.
* :class:`BoundSocket` records the device and inode of the socket this process bound;
  :meth:`BoundSocket.remove` unlinks the path only when it is still that socket just
  before the unlink. Linux has no atomic "unlink if still this inode", so a newcomer that
  replaces the path in the microseconds between that check and the unlink loses its
  socket: a narrow race at shutdown, not a rule.

Two daemons on one state dir are kept apart by the single-instance lock; two daemons
with different state dirs and one socket path are kept apart here: the second finds the
first's socket live (or in doubt) and refuses, and if an operator removed the first's
socket so that the second could start, the first's shutdown leaves the second's alone.

A temporary name that would not fit in :data:`MAX_SOCKET_PATH` bytes (a final path
within a few bytes of it) falls back to binding the final path directly: only then does
grpcio's unlink at stop remove whatever socket is at the path.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import socket
from typing import Protocol

from numamem.api.statedir import who_cannot_write
from numamem.errors import PATH_QUOTE_BYTES, StartupError, quote
from numamem.logging import get_logger
from numamem.socketpath import (
    MAX_SOCKET_PATH,
)

_log = get_logger("server")

SOCKET_UMASK = 0o117  # socket 0660
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV)


class PortBinder(Protocol):
    """What :func:`bind_unix_socket` needs of a ``grpc.Server``."""

    def add_insecure_port(self, address: str) -> int: ...


class BoundSocket:
    """A socket file this process bound: its path and identity (``st_dev``, ``st_ino``).

    Holds an ``O_PATH`` descriptor of the file until :meth:`remove` (or :meth:`close`):
    while it is open the inode cannot be freed, so a newcomer's socket made at the path
    after ours was unlinked can never get our inode number (an identity check by number
    alone would then match it)."""

    def __init__(self, path: str, opened_as: str | None = None) -> None:
        """``opened_as``: another name of the same file to open (the temporary name)."""
        self.path = path
        self._fd: int | None = os.open(opened_as or path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        st = os.fstat(self._fd)
        self.device, self.inode = st.st_dev, st.st_ino

    def remove(self) -> bool:
        """Unlink :attr:`path` if it is still this socket; True when it was removed. Another
        process's socket there (a newcomer that took the path over) is left alone, except in
        a narrow race: one that replaces the path between the identity check and the unlink
        (no atomic unlink-if-same-inode on Linux) is unlinked. Idempotent; closes the
        descriptor."""
        if self._fd is None:
            return False
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return False
        else:
            if (st.st_dev, st.st_ino) != (self.device, self.inode):
                _log.info(
                    "socket path taken over by another process: left in place", socket=self.path
                )
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return True
        finally:
            self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def bind_unix_socket(server: PortBinder, path: str, flag: str) -> BoundSocket:
    """Listen on ``path``, created 0660 (never wider, even for a moment: under a umask), via a
    temporary name linked onto ``path`` (see the module docstring); returns what was bound.
    Refuses when ``path`` exists by then (created by another process since
    :func:`prepare_socket_path`)."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name[:8]}.{os.getpid()}.{secrets.token_hex(4)}")
    direct = len(temporary.encode()) > MAX_SOCKET_PATH
    target = path if direct else temporary
    old_umask = os.umask(SOCKET_UMASK)
    try:
        server.add_insecure_port(f"unix://{target}")
    except RuntimeError as err:
        raise StartupError(bind_failure(path, flag, str(err), _probe_bind(target))) from err
    finally:
        os.umask(old_umask)
    os.chmod(target, 0o660)
    if direct:
        return BoundSocket(path)
    bound = BoundSocket(path, opened_as=temporary)
    try:
        _publish(temporary, path, flag)
    except BaseException:
        bound.close()
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return bound


def _publish(temporary: str, path: str, flag: str) -> None:
    """Give the socket bound at ``temporary`` its final name ``path``, never over a file."""
    shown = quote(path, limit=PATH_QUOTE_BYTES)
    try:
        os.link(temporary, path)
    except FileExistsError as err:
        raise StartupError(_taken(shown, flag)) from err
    except OSError as err:
        if err.errno not in _NO_HARD_LINKS:
            raise StartupError(
                f"{flag} {shown}: cannot name the unix socket: {(err.strerror or str(err)).lower()}"
            ) from err
        linked = err
    else:
        return
    # A file system without hard links: rename, but never over a file made meanwhile.
    try:
        rename_noreplace(temporary, path)
    except FileExistsError as err:
        raise StartupError(_taken(shown, flag)) from err
    except OSError as err:
        raise StartupError(
            f"{flag} {shown}: cannot name the unix socket: the file system has no hard links "
            f"(link: {(linked.strerror or str(linked)).lower()}) and renaming without "
            f"replacing failed (renameat2 RENAME_NOREPLACE: {(err.strerror or str(err)).lower()}); "
            f"numamem never renames over a path that may hold another socket: choose a {flag} "
            "on another file system (a tmpfs such as /run)"
        ) from err


def _taken(shown: str, flag: str) -> str:
    return (
        f"{flag} {shown}: created by another process while numamem was starting; "
        f"stop it or choose another {flag}"
    )


RENAME_NOREPLACE = 1
"""``renameat2``'s flag (linux/fs.h): fail with EEXIST when the new path exists."""
_AT_FDCWD = -100


def rename_noreplace(src: str, dst: str) -> None:
    """``rename(src, dst)`` that raises FileExistsError when ``dst`` exists, atomically
    (``renameat2`` with ``RENAME_NOREPLACE``, Linux 3.15, glibc 2.28: Python 3.11's
    ``os.rename`` has no flags). OSError ENOSYS when the C library has no ``renameat2``;
    EINVAL when the file system does not support the flag."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "this C library has no renameat2", dst)
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE):
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            raise FileExistsError(code, os.strerror(code), dst)
        raise OSError(code, os.strerror(code), dst)


def _probe_bind(path: str) -> OSError | None:
    """Why the kernel refuses to bind ``path`` (grpcio's error does not say), or None."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(path)
    except OSError as err:
        return err
    finally:
        probe.close()
    with contextlib.suppress(OSError):
        os.unlink(path)
    return None


def bind_failure(path: str, flag: str, grpc_error: str, probe: OSError | None) -> str:
    """The refusal for a socket that cannot be bound: the kernel's reason, the directory and
    who this process is when the directory is not writable; grpcio's text otherwise."""
    if probe is None or probe.errno is None:
        return f"{flag} {quote(path, limit=PATH_QUOTE_BYTES)}: cannot bind the unix socket: {grpc_error}"
    directory = os.path.dirname(path) or "."
    reason = (probe.strerror or str(probe)).lower()
    if probe.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"{flag} {quote(path, limit=PATH_QUOTE_BYTES)}: cannot bind the unix socket: "
            f"{reason}: {who_cannot_write(directory)}; run numamem as a user who can, give that "
            f"user write access to the directory, or choose another {flag}"
        )
    return f"{flag} {quote(path, limit=PATH_QUOTE_BYTES)}: cannot bind the unix socket: {reason}"
