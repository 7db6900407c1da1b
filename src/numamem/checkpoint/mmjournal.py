"""The memory manager's commit journal (``numamem_state_journal``): one fsync per change.

By default (``--state-commit=replace``) every change replaces ``memory_manager_state`` and
the container map (one :func:`~numamem.checkpoint.filestore.atomic_write_all`: two temp
files fsynced, two renames, a directory sync), so the kubelet's file is current after every
acknowledged change, as the kubelet keeps its own. With ``--state-commit=journal`` a change
is acknowledged once one record is appended to this journal and fsynced: one fsync
instead of three (``make bench`` compares the two), for agents on the container-creation
path (the NRI plugin). The journal is folded into the two files (a *compaction*) once it outgrows
:data:`COMPACT_MIN_BYTES` and four records, at every graceful stop, and when a daemon in
``replace`` mode starts on it; until then ``memory_manager_state`` lags behind the journal
(a deliberate difference from the kubelet's file, which only the journal mode has).

The file is records in the frame of :mod:`numamem.checkpoint.records`: the header
:data:`HEADER`, then one record per acknowledged change holding the *whole* new content of
both files, ``b"<state bytes> <map bytes>\\n" + state + map``. So the last good record is
the state, whatever came before it, and a record is the two files at once: the order the
replace mode keeps between their renames is not needed. Invariant: the files hold an
earlier (or the same) state than the journal's last record, so restoring is: the last good
record when there is one, else the files (:func:`~numamem.checkpoint.mmcurrent.current_source`
for the offline readers, :meth:`CommitJournal.load` for the daemon).

* A torn last record (a crash during its append, never acknowledged) is dropped. A damaged
  record with anything after it is damage to acknowledged changes: the start is refused
  with the kubelet's wrapper text naming the journal and the fix.
* A failed append is cut off again (:mod:`numamem.checkpoint.appendlog`). When the journal
  cannot be trusted to end at its last good record (a cut-off that failed, an interrupt, a
  torn tail or a missing header at start, no journal yet), the next change first *settles*:
  one atomic write of the map, the state (memory's, as acknowledged) and a fresh journal,
  in that order, the journal last, so a power cut before its rename leaves the old journal
  to override files that only caught up with it. Then the change is appended.
* A compaction is the same write with the new content right after an append. Its failure
  loses nothing (the record is durable): it is logged and retried by the next change that
  finds the journal over its bound. A change that would take the journal past
  :data:`MAX_JOURNAL_BYTES` settles first, so a journal whose compactions keep failing
  stops growing: such a change fails, not applied, until the files can be written. When only its directory sync fails, the new journal's
  name may not be durable, so each later change syncs the directory before it is
  acknowledged, until that succeeds (DurabilityUnknownError while it fails).

Not thread-safe: the store calls it under the memory manager's lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from numamem.checkpoint.appendlog import TornTailError, append_durably
from numamem.checkpoint.filestore import FaultHook, close_quietly, read_file
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.records import Scan, frame
from numamem.errors import PATH_QUOTE_BYTES, CheckpointError, DurabilityUnknownError, quote

JOURNAL_FILE = "numamem_state_journal"
HEADER = frame(b'{"memoryManagerJournal":1}')
COMPACT_MIN_BYTES = 1 << 20
"""The journal is compacted once it holds more than this and more than four records."""
MAX_JOURNAL_BYTES = 64 << 20
"""The journal's budget: while compactions fail (logged, the change acknowledged), records
pile up; a change that would take the journal past this (or past 16 records' worth, for a
state larger than a 64th of it) compacts first, and fails, not applied, when that fails
too. So a start never reads more than this, and the operator sees the failure."""


def record(state: bytes, containers: bytes) -> bytes:
    """The framed record of a change whose files become ``state`` and ``containers``."""
    return frame(b"%d %d\n" % (len(state), len(containers)) + state + containers)


@dataclass(frozen=True, slots=True)
class JournalRead:
    """What a journal holds: the files' content of its last good record (None: no record),
    how many records, where the good ones end, the bytes of a torn last one, and whether it
    starts with the header."""

    state: bytes | None
    containers: bytes | None
    records: int
    end: int
    torn: int
    headed: bool


def read_journal(data: bytes, where: Path) -> JournalRead:
    """Parse a journal's bytes; CheckpointError for damage to acknowledged records."""
    headed = data.startswith(HEADER)
    scan = Scan(data, where)
    last: tuple[int, int] | None = None
    spans = iter(scan)
    if headed:
        next(spans)  # the header
    for span in spans:
        last = span
    records = scan.records - (1 if headed else 0)
    if last is None:
        return JournalRead(None, None, records, scan.end, scan.torn, headed)
    if not headed:
        raise CheckpointError(f"{where}: the journal does not start with its header")
    state, containers = _decode(data, last, where)
    return JournalRead(state, containers, records, scan.end, scan.torn, headed)


def _decode(data: bytes, span: tuple[int, int], where: Path) -> tuple[bytes, bytes]:
    start, end = span
    newline = data.find(b"\n", start, min(end, start + 42))
    sizes = data[start:newline].split(b" ") if newline >= 0 else []
    if len(sizes) != 2 or not all(s.isdigit() for s in sizes):
        raise CheckpointError(f"{where}: journal record at byte {start} has no sizes")
    n_state, n_map = int(sizes[0]), int(sizes[1])
    body = newline + 1
    if body + n_state + n_map != end:
        raise CheckpointError(f"{where}: journal record at byte {start} has wrong sizes")
    return data[body : body + n_state], data[body + n_state : end]


class CommitJournal:
    """The store's side of the journal file: its descriptor, its size, whether the next
    change must settle first (``needs_settle``), and a directory sync still owed."""

    def __init__(self, directory: Path, fs: FileSystem = REAL) -> None:
        self.path = directory / JOURNAL_FILE
        self.fs = fs
        self._fd: int | None = None
        self.size = 0
        self.records = 0
        self.last_record = 0
        self.needs_settle = True
        """Nothing may be appended before the files and a fresh journal are written."""
        self.directory_unknown: str | None = None
        """Why the directory sync after a journal swap failed (retried before each append)."""
        self.appends = 0
        self.compactions = 0
        self.compact_bytes = COMPACT_MIN_BYTES
        """The size past which the journal is compacted (tests set it low)."""
        self.max_bytes = MAX_JOURNAL_BYTES
        """The journal's budget (:data:`MAX_JOURNAL_BYTES`; tests set it low)."""

    def load(self) -> JournalRead | None:
        """The journal as a restart reads it (None: no file); a torn tail or a missing header
        makes the next change settle. CheckpointError: damage (the start is refused)."""
        data = read_file(self.path, self.fs)
        if data is None:
            return None
        found = read_journal(data, self.path)
        self.size, self.records = found.end, found.records
        self.needs_settle = found.torn > 0 or not found.headed
        return found

    def append(self, data: bytes, faults: FaultHook | None) -> None:
        """Append the record ``data`` and fsync it, as
        :func:`~numamem.checkpoint.appendlog.append_durably` says; opens the file first when
        it is not open (an OSError there: PersistenceError from the caller's handling)."""
        if self._fd is None:
            if faults is not None:
                faults("open", self.path)
            self._fd = self.fs.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            append_durably(
                self.fs,
                self._fd,
                data,
                self.size,
                path=self.path,
                failed=f"cannot append to the memory manager journal {quote(self.path, limit=PATH_QUOTE_BYTES)}",
                rewrite="the next change rewrites memory_manager_state and the journal",
                faults=faults,
            )
        except (TornTailError, DurabilityUnknownError):
            self.needs_settle = True  # the journal may not end at its last good record
            raise
        self.size += len(data)
        self.records += 1
        self.last_record = len(data)
        self.appends += 1

    def full(self, more: int) -> bool:
        """Whether appending ``more`` bytes would take the journal past its budget."""
        return self.size + more > max(self.max_bytes, 16 * more)

    def should_compact(self) -> bool:
        return self.records > 4 and self.size > max(self.compact_bytes, 4 * self.last_record)

    def swapped(self) -> None:
        """A fresh journal was renamed into place: the old descriptor is closed (the next
        append opens the new file)."""
        self.close()
        self.size, self.records = len(HEADER), 0
        self.needs_settle = False

    def close(self) -> None:
        """Close the append descriptor (the next append reopens it)."""
        fd, self._fd = self._fd, None
        close_quietly(self.fs, fd)
