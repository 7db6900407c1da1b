"""A damaged checkpoint nested deeper than Python recurses is refused by its reader's own
error (a refusal that names the file), never a RecursionError out of the daemon's start."""

from __future__ import annotations

from pathlib import Path

import pytest

from numamem.checkpoint.containerfile import read_container_file
from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.checkpoint.namesfile import read_names
from numamem.checkpoint.records import frame
from numamem.errors import CheckpointError
from numamem.metacache import journal
from numamem.metacache.cache import State
from numamem.metacache.persistence import STATE_FILE as SNAPSHOT_FILE
from numamem.metacache.persistence import decode_snapshot, encode

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 900 + b"1" + b"}" * 900  # parses, then recurses in the reader


@pytest.mark.parametrize("data", [DEEP, DEEP_OBJECT], ids=["array", "object"])
def test_the_memory_manager_state_file_is_refused_with_the_kubelets_text(
    tmp_path: Path, data: bytes
) -> None:
    (tmp_path / STATE_FILE).write_bytes(data)
    with pytest.raises(CheckpointError, match="could not restore state from checkpoint"):
        KubeletStateStore(tmp_path).restore("Static")


def test_the_container_map_and_the_names_file_are_damage(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot decode container map"):
        read_container_file(DEEP)
    found = read_names(frame(b'{"podNames":1}') + frame(DEEP), tmp_path)
    assert found.names == {} and found.damage is not None


def test_the_metacache_snapshot_and_journal_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not valid JSON"):
        decode_snapshot(DEEP)
    (tmp_path / SNAPSHOT_FILE).write_bytes(encode(State()))
    (tmp_path / journal.JOURNAL_FILE).write_bytes(journal.header(0) + frame(DEEP) + frame(b"{}"))
    with pytest.raises(CheckpointError, match="is not JSON"):
        journal.read(tmp_path)
