"""The daemon's directories and its single-instance lock: checked, created, taken.

:func:`check_dir`, :func:`write_error`, :func:`check_writable_dir` and
:func:`lock_file_refusal` only read (``numamem serve --check`` runs them too);
:func:`make_dirs` creates what is missing and returns it, so that a refused start
removes exactly that; :func:`acquire_lock` takes ``<state-dir>/numamem.lock`` without
writing it and :func:`record_pid` writes this process's pid into it once a start
succeeded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import stat
from pathlib import Path

from numamem.errors import PATH_QUOTE_BYTES, StartupError, quote

LOCK_FILE = "numamem.lock"


def check_dir(path: Path, what: str, allow_shared: bool) -> None:
    """Refuse an existing ``path`` that is not a directory or that other users may write to."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise StartupError(
            f"{what} {quote(path, limit=PATH_QUOTE_BYTES)}: cannot stat: {err.strerror}"
        ) from err
    if not stat.S_ISDIR(st.st_mode):
        raise StartupError(
            f"{what} {quote(path, limit=PATH_QUOTE_BYTES)}: exists and is not a directory"
        )
    if allow_shared:
        return
    uid = os.geteuid()
    problem = ""
    if st.st_uid not in (uid, 0):
        problem = f"is owned by uid {st.st_uid}, not by this user ({uid}) or root"
    elif st.st_mode & stat.S_IWOTH:
        problem = f"is world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
    elif st.st_mode & stat.S_IWGRP and st.st_gid not in (os.getegid(), *os.getgroups()):
        problem = f"is writable by group {st.st_gid} (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise StartupError(
            f"{what} {quote(path, limit=PATH_QUOTE_BYTES)} {problem}: another user could replace numamem's files; "
            "fix its owner/mode or pass --allow-shared-dirs"
        )


def write_error(directory: str | Path) -> OSError | None:
    """Why this process cannot create, rename or remove files in the existing ``directory``
    (a read-only file system: EROFS; no write or search permission: EACCES), or None.
    Reads only (statvfs, access(2): the real uid, with the capabilities it has)."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            code = errno.EROFS
        elif not os.access(directory, os.W_OK | os.X_OK):
            code = errno.EACCES
        else:
            return None
    except OSError as err:
        return err
    return OSError(code, os.strerror(code))


def who_cannot_write(directory: str | Path) -> str:
    """``user NAME (uid N) cannot create files in DIR (owner uid U, mode M)``."""
    uid = os.geteuid()
    try:
        user = f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        user = f"uid {uid}"
    owner = ""
    with contextlib.suppress(OSError):
        st = os.stat(directory)
        owner = f" (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
    return f"{user} cannot create files in {directory}{owner}"


def check_writable_dir(path: Path, what: str) -> None:
    """Refuse the existing directory ``path`` when this process cannot create files in it
    (a start writes its checkpoints there by temporary file and rename)."""
    err = write_error(path)
    if err is not None:
        reason = (err.strerror or str(err)).lower()
        raise StartupError(
            f"{what} {quote(path, limit=PATH_QUOTE_BYTES)}: cannot write checkpoints: {reason}: "
            f"{who_cannot_write(path)}; run numamem as a user who can, give that user write "
            f"access to the directory, or choose another {what}"
        )


def lock_file_refusal(path: Path, st: os.stat_result) -> StartupError | None:
    """The refusal for a lock file ``st`` describes that is no regular file, or None."""
    if stat.S_ISREG(st.st_mode):
        return None
    shown = quote(path, limit=PATH_QUOTE_BYTES)
    if stat.S_ISDIR(st.st_mode):
        return StartupError(f"lock file {shown}: cannot open: {os.strerror(errno.EISDIR)}")
    kind = {
        stat.S_IFIFO: "a FIFO",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
    }.get(stat.S_IFMT(st.st_mode), "not a regular file")
    return StartupError(
        f"lock file {shown} is {kind}, not a regular file; numamem never deletes it: "
        "remove it yourself or choose another --state-dir"
    )


def make_dirs(path: Path, mode: int, what: str) -> list[Path]:
    """Create ``path`` (and missing parents) with ``mode``; returns what was created, outermost first."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    created: list[Path] = []
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=mode)
            os.chmod(directory, mode)
        except OSError as err:
            for made in reversed(created):
                with contextlib.suppress(OSError):
                    made.rmdir()
            raise StartupError(
                f"{what} {quote(path, limit=PATH_QUOTE_BYTES)}: cannot create: {err.strerror}"
            ) from err
        created.append(directory)
    return created


def acquire_lock(path: Path) -> tuple[int, bool]:
    """Take the single-instance lock: (the fd that holds it until closed, whether the file is new).

    Writes nothing: the file keeps the pid of the last daemon that started on this state dir
    (:func:`record_pid`), so a refusal names the holder when it is that process."""
    created = not path.exists()
    with contextlib.suppress(OSError):  # a device or FIFO is refused before it is opened
        refusal = lock_file_refusal(path, os.stat(path))
        if refusal is not None:
            raise refusal
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOCTTY, 0o600)
    except OSError as err:
        raise StartupError(
            f"lock file {quote(path, limit=PATH_QUOTE_BYTES)}: cannot open: {err.strerror}"
        ) from err
    refusal = lock_file_refusal(path, os.fstat(fd))  # replaced since the stat
    if refusal is not None:
        os.close(fd)
        raise refusal
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        holder = ""
        with contextlib.suppress(OSError, ValueError):
            pid = int(os.pread(fd, 32, 0).decode().strip())
            with contextlib.suppress(PermissionError):  # alive, another user's
                os.kill(pid, 0)  # a holder still starting has not written its pid yet
            holder = f" (pid {pid})"
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                path.unlink()
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise StartupError(
                f"another numamem{holder} is running on state dir {quote(path.parent, limit=PATH_QUOTE_BYTES)} "
                f"(lock {quote(path, limit=PATH_QUOTE_BYTES)} is held); stop it or choose another --state-dir"
            ) from err
        raise StartupError(
            f"lock file {quote(path, limit=PATH_QUOTE_BYTES)}: cannot lock: {err.strerror}"
        ) from err
    return fd, created


def claim_state_dir(state_dir: Path) -> tuple[int, bool]:
    """:func:`acquire_lock` on ``state_dir``'s lock file, then refuse (lock released) a state
    dir this process cannot write checkpoints in (:func:`check_writable_dir`)."""
    path = state_dir / LOCK_FILE
    fd, created = acquire_lock(path)
    try:
        check_writable_dir(state_dir, "--state-dir")
    except StartupError:
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    return fd, created


def record_pid(fd: int) -> None:
    """Write this process's pid into the lock file held by ``fd`` (only once a start has
    succeeded: a refused start leaves the file's bytes and mtime as they were)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
