"""``numamem serve --check``: every validation of a start, and nothing a start changes.

:func:`check_start` runs the steps of :meth:`numamem.api.server.Daemon.start` that only
read, in the same order and with the same refusals (each a
:class:`~numamem.errors.NumamemError` whose text is the one ``serve`` prints):

1. the state and socket directories (owner, mode) and the socket path's length;
2. the components are built: the configuration's rules (reservations against the
   machine, policy options, feature gates) and topology discovery on ``--sysfs-root``;
3. the directories ``serve`` would create: their nearest existing parent must be a
   writable directory (the ``cannot create`` refusal of a start);
4. the single-instance lock file: a regular file that opens for reading and writing
   (opened without ``O_CREAT``, closed at once; never created, never taken), or, when
   missing, a state dir where it can be created. When a live numamem holds it
   (``/proc/locks``), this is a configuration check beside a running daemon: said in
   the summary, and the socket checks below are left out (that daemon serves them).
   Then an existing state dir must be one this process can write checkpoints in (write
   and search permission, not on a read-only file system);
5. the checkpoints in ``--state-dir`` are read and validated by the components whose
   ``load`` only reads (topology, memory manager, metacache), through a file system that
   refuses every write (a write attempt is reported as a numamem bug). With
   ``--metacache-discard-corrupt-state`` a corrupt metacache is what ``serve`` would set
   aside (a note), not a refusal;
6. ``--metrics-socket``, ``--podresources-socket`` (and its directory) and ``--socket``:
   a non-socket file, a live socket and one in doubt are refused as ``serve`` refuses
   them; a dead one is a note (``serve`` removes it); an existing directory this
   process cannot create the socket in is refused as the bind fails;
7. the metacache journal that the start appends to (when it keeps the one found) must
   be writable.

Permissions are asked of the kernel with ``access(2)`` (real uid, with the
capabilities the process has) and ``statvfs`` (a read-only mount).

Never done: binding (so whether ``--health-port``/``--metrics-port`` are free is not
known), locking, creating or removing a file or directory, writing.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from numamem.api.component import Component, service_names
from numamem.api.memorymanager import MemoryManagerComponent
from numamem.api.metacache import MetaCacheComponent
from numamem.api.sockets import bind_failure
from numamem.api.statedir import (
    LOCK_FILE,
    check_dir,
    check_writable_dir,
    lock_file_refusal,
    write_error,
)
from numamem.api.topology import TopologyComponent
from numamem.checkpoint.fs import FileSystem, StrPath
from numamem.checkpoint.mmjournal import JOURNAL_FILE as MM_JOURNAL_FILE
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE
from numamem.checkpoint.namesfile import NAMES_FILE
from numamem.config.model import Config
from numamem.errors import PATH_QUOTE_BYTES, CheckpointError, StartupError, quote
from numamem.metacache.journal import JOURNAL_FILE
from numamem.metacache.journal_load import append_refusal
from numamem.metacache.journal_store import JournalPersister
from numamem.metacache.persistence import STATE_FILE as METACACHE_FILE
from numamem.socketpath import check_socket_path, classify_socket_path

CHECKPOINTS = (
    STATE_FILE, CONTAINERS_FILE, MM_JOURNAL_FILE, NAMES_FILE, METACACHE_FILE, JOURNAL_FILE,
)  # fmt: skip
_READ_ONLY_LOADS = (TopologyComponent, MemoryManagerComponent, MetaCacheComponent)
"""The components whose ``load`` reads and validates but writes and binds nothing."""
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class ReadOnlyFileSystem(FileSystem):
    """Reads as the real file system; every write raises (the check must write nothing)."""

    def _refuse(self, operation: str, path: object) -> StartupError:
        return StartupError(
            f"internal error: numamem serve --check would {operation} {quote(str(path), limit=PATH_QUOTE_BYTES)}; "
            "nothing was written (a numamem bug: please report it)"
        )

    def open(self, path: StrPath, flags: int, mode: int = 0o600) -> int:
        if flags & _WRITES:
            raise self._refuse("open for writing", path)
        return super().open(path, flags, mode)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        raise self._refuse("write to", f"fd {fd}")

    def fsync(self, fd: int) -> None:
        raise self._refuse("sync", f"fd {fd}")

    def ftruncate(self, fd: int, length: int) -> None:
        raise self._refuse("truncate", f"fd {fd}")

    def replace(self, src: StrPath, dst: StrPath) -> None:
        raise self._refuse("replace", dst)

    def rename(self, src: StrPath, dst: StrPath) -> None:
        raise self._refuse("rename", src)

    def link(self, src: StrPath, dst: StrPath) -> None:
        raise self._refuse("link", dst)

    def unlink(self, path: StrPath) -> None:
        raise self._refuse("remove", path)


READ_ONLY = ReadOnlyFileSystem()


@dataclass
class CheckReport:
    """What :func:`check_start` found (it raises on a refusal)."""

    config: Config
    checkpoints: list[str] = field(default_factory=list)
    """The checkpoint files found in the state dir, read and validated."""
    notes: list[str] = field(default_factory=list)
    """What ``serve`` would do or say that is no refusal."""

    def summary(self) -> str:
        cfg = self.config
        read = ", ".join(self.checkpoints) if self.checkpoints else "none yet"
        notes = "".join(f"; {note}" for note in self.notes)
        return (
            f"check passed: {cfg.memory_manager_policy} memory manager policy, topology from "
            f"{cfg.sysfs_root}; checkpoints in {cfg.state_dir} read and valid: {read}{notes}; "
            "nothing was bound, locked, created or written (ports were not tried)"
        )


def check_start(
    config: Config,
    factory: Callable[[Config], Sequence[Component]],
    proc_locks: Path = Path("/proc/locks"),
) -> CheckReport:
    """The module docstring's steps for ``config``; ``factory`` builds the components (give
    it :data:`READ_ONLY` as their file system). Raises what ``serve`` would refuse with."""
    report = CheckReport(config)
    state_dir, socket_dir = Path(config.state_dir), Path(config.socket).parent
    check_dir(state_dir, "--state-dir", config.allow_shared_dirs)
    check_dir(socket_dir, "--socket directory", config.allow_shared_dirs)
    check_socket_path(config.socket)
    discard = config.metacache_discard_corrupt_state
    components = factory(replace(config, metacache_discard_corrupt_state=False))
    service_names(components)
    could_make(state_dir, "--state-dir")
    could_make(socket_dir, "--socket directory")
    holder = check_lock(state_dir / LOCK_FILE, proc_locks)
    if state_dir.exists():
        check_writable_dir(state_dir, "--state-dir")
    if holder is not None:
        report.notes.append(
            f"numamem (pid {holder}) is running on this state dir: its checkpoints were read "
            "while it runs and its sockets were not checked; a start now would be refused "
            "until it stops"
        )
    for component in components:
        if not isinstance(component, _READ_ONLY_LOADS):
            continue
        try:
            component.load()
        except CheckpointError as err:
            if not (discard and isinstance(component, MetaCacheComponent)):
                raise
            report.notes.append(
                f"the metacache checkpoint is unusable and would be set aside "
                f"(--metacache-discard-corrupt-state): {err}"
            )
    report.checkpoints = [name for name in CHECKPOINTS if (state_dir / name).is_file()]
    if holder is None:
        check_side_sockets(config, report)
        check_socket(config.socket, "--socket", report)
        check_bindable(config.socket, "--socket")
    for component in components:
        if isinstance(component, MetaCacheComponent) and component.persister is not None:
            check_journal(component.persister)
    return report


def check_journal(persister: JournalPersister) -> None:
    """Refuse, as the metacache's start would, a journal it appends to but may not write."""
    path = persister.journal_path
    if persister.appends_to_found_journal and path.is_file() and not os.access(path, os.W_OK):
        denied = OSError(errno.EACCES, os.strerror(errno.EACCES))
        raise StartupError(append_refusal(path, denied))


def check_side_sockets(config: Config, report: CheckReport) -> None:
    """``--metrics-socket`` and ``--podresources-socket`` as their components' load checks
    them (in the daemon's order)."""
    if config.metrics_socket is not None:
        check_socket(config.metrics_socket, "--metrics-socket", report)
        directory = os.path.dirname(config.metrics_socket) or "."
        failure: OSError | None = OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        if os.path.isdir(directory):
            failure = write_error(directory)
        if failure is not None:
            raise StartupError(
                f"--metrics-socket {quote(config.metrics_socket, limit=PATH_QUOTE_BYTES)}: cannot listen: "
                f"{failure.strerror}"
            )
    if config.podresources_socket is not None:
        path = config.podresources_socket
        check_socket_path(path, "--podresources-socket")
        parent = Path(path).parent
        check_dir(parent, "--podresources-socket directory", config.allow_shared_dirs)
        could_make(parent, "--podresources-socket directory")
        check_socket(path, "--podresources-socket", report)
        check_bindable(path, "--podresources-socket")


def check_bindable(path: str, flag: str) -> None:
    """Refuse, as the bind of :func:`numamem.api.sockets.bind_unix_socket` would, a socket
    whose existing directory this process cannot create files in."""
    directory = os.path.dirname(path) or "."
    if os.path.isdir(directory):
        failure = write_error(directory)
        if failure is not None:
            raise StartupError(bind_failure(path, flag, "", failure))


def check_socket(path: str, flag: str, report: CheckReport) -> None:
    """:func:`numamem.socketpath.prepare_socket_path` without removing anything: the
    stale socket it would remove is a note."""
    if classify_socket_path(path, flag) is not None:
        report.notes.append(
            f"{flag} {quote(path, limit=PATH_QUOTE_BYTES)} is a stale socket that a start removes"
        )


def could_make(path: Path, what: str) -> None:
    """Refuse as :func:`numamem.api.statedir.make_dirs` would when ``path`` is missing and
    its nearest existing parent is no directory this process can create entries in."""
    probe = path
    while not os.path.lexists(probe):
        if probe.parent == probe:
            return
        probe = probe.parent
    if probe == path:
        return
    if probe.is_dir():
        failure = write_error(probe)
    else:
        failure = OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    if failure is not None:
        raise StartupError(
            f"{what} {quote(path, limit=PATH_QUOTE_BYTES)}: cannot create: {failure.strerror}"
        )


def check_lock(path: Path, proc_locks: Path) -> int | None:
    """The pid of a process that holds the lock file (``flock``), or None; refuses, as
    :func:`numamem.api.statedir.acquire_lock` would, a lock file that cannot be opened or
    created, or that is no regular file. Creates nothing, locks nothing."""
    shown = quote(path, limit=PATH_QUOTE_BYTES)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        failure = write_error(path.parent) if path.parent.is_dir() else None
        if failure is not None:  # serve's open(O_CREAT) fails so
            raise StartupError(f"lock file {shown}: cannot open: {failure.strerror}") from None
        return None
    except OSError as err:
        raise StartupError(f"lock file {shown}: cannot open: {err.strerror}") from err
    refusal = lock_file_refusal(path, st)
    if refusal is not None:
        raise refusal
    try:  # a regular file: opening it changes nothing (no O_CREAT, no O_TRUNC)
        os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY))
    except OSError as err:
        raise StartupError(f"lock file {shown}: cannot open: {err.strerror}") from err
    return flock_holder(st, proc_locks)


def flock_holder(st: os.stat_result, proc_locks: Path) -> int | None:
    """The pid /proc/locks names for a FLOCK on the file ``st`` describes, or None.
    A line: ``1: FLOCK  ADVISORY  WRITE 1234 fd:00:2148313 0 EOF`` (major:minor in hex)."""
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = proc_locks.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
            try:
                return int(fields[4])
            except ValueError:
                return None
    return None
