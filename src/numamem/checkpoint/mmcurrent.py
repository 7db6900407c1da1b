"""What a restart of the memory manager reads, for the offline tools (``numamem state``).

The commit journal's last good record when there is one (:mod:`numamem.checkpoint.mmjournal`),
else ``memory_manager_state`` and the container map. Read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from numamem.checkpoint.filestore import read_file
from numamem.checkpoint.fs import REAL, FileSystem
from numamem.checkpoint.mmjournal import JOURNAL_FILE, JournalRead, read_journal
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE


class Current(NamedTuple):
    """What a restart reads as ``memory_manager_state`` and the container map (None:
    missing), where each comes from (for messages) and the journal as read (None: no journal
    file)."""

    state_source: Path
    state: bytes | None
    containers_source: Path
    containers: bytes | None
    journal: JournalRead | None


def current_source(state_dir: Path, fs: FileSystem = REAL) -> Current:
    """The commit journal's last good record, else the files, read once. Read-only;
    CheckpointError for a damaged journal, OSError as reading raises it."""
    path = state_dir / JOURNAL_FILE
    data = read_file(path, fs)
    found = read_journal(data, path) if data is not None else None
    if found is not None and found.state is not None:
        return Current(path, found.state, path, found.containers, found)
    state = read_file(state_dir / STATE_FILE, fs)
    containers = read_file(state_dir / CONTAINERS_FILE, fs)
    return Current(state_dir / STATE_FILE, state, state_dir / CONTAINERS_FILE, containers, found)
