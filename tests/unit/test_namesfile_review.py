"""The pod names file under the sequences of a hostile review: each test is a sequence that
once broke an invariant of :mod:`numamem.checkpoint.namesfile` (see each docstring)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from numamem.checkpoint.containerfile import encode_containers, read_container_file
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE
from numamem.checkpoint.namesfile import NAMES_FILE, encode_names, read_names
from numamem.checkpoint.records import frame
from numamem.errors import PersistenceError
from tests.unit.test_memorymanager import GI, MI, two_nodes
from tests.unit.test_namesfile import (
    failed_named_admission,
    failing,
    manager,
    named,
    restart_names,
)


def damage_second_record(directory: Path) -> bytes:
    data = bytearray((directory / NAMES_FILE).read_bytes())
    data[data.index(b'"u2"') + 1] = ord("X")  # u2's checksum fails; u3's record follows
    (directory / NAMES_FILE).write_bytes(bytes(data))
    return bytes(data)


def asides(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith(NAMES_FILE + ".corrupt-"))


def test_names_kept_from_a_damaged_file_survive_a_second_restart(tmp_path: Path) -> None:
    """The damaged file is set aside at start and the names read before the damage are kept:
    they must be on disk then, not only in memory until some later save names a pod."""
    m = manager(tmp_path)
    for uid in ("u1", "u2", "u3"):
        assert m.admit(named(uid)).result.admitted
    damage_second_record(tmp_path)
    assert manager(tmp_path).pod_names() == {"u1": ("shop", "web-u1")}
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1"))]


def test_a_start_that_rewrites_the_state_sets_the_damaged_file_aside_not_its_fold(
    tmp_path: Path,
) -> None:
    """A start that writes the state (here: a machine that shrank within the drift tolerance)
    saves before the damaged file is set aside: the file set aside must be the damaged one
    (the evidence), and the names kept must stay in the names file."""
    m = manager(tmp_path)
    for uid in ("u1", "u2", "u3"):
        assert m.admit(named(uid)).result.admitted
    damaged = damage_second_record(tmp_path)
    shrunk = two_nodes(memory=8 * GI - 64 * MI)
    again = manager(tmp_path, shrunk)
    assert again.pod_names() == {"u1": ("shop", "web-u1")}
    assert [p.read_bytes() for p in asides(tmp_path)] == [damaged]
    found = read_names((tmp_path / NAMES_FILE).read_bytes(), tmp_path)
    assert (found.names, found.damage) == ({"u1": ("shop", "web-u1")}, None)
    assert list(manager(tmp_path, shrunk).pod_names().items()) == [("u1", ("shop", "web-u1"))]


class Interrupt(BaseException):
    """Not an Exception: an interrupt, or a thread's exit, in the middle of a write."""


def test_a_save_interrupted_by_a_base_exception_leaves_the_store_at_memorys_names(
    tmp_path: Path,
) -> None:
    """x's name is appended, then the state's write is interrupted (not an Exception): the
    change is not applied, so the store's idea of memory must stay the old names; else the
    next fold writes x's name back and x, admitted again without one, gets it at restart."""
    armed: list[tuple[str, str] | None] = [None]

    def hook(stage: str, target: Path) -> None:
        if armed[0] == (stage, target.name):
            armed[0] = None
            raise Interrupt

    m = manager(tmp_path, faults=hook)
    assert m.admit(named("u1")).result.admitted
    armed[0] = ("fsync", STATE_FILE)
    with pytest.raises(Interrupt):
        m.admit(named("x"))
    assert "x" not in m.committed().view.get_memory_assignments()
    assert m.admit(named("x", "")).result.admitted
    assert m.pod_names() == {"u1": ("shop", "web-u1")}
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1"))]
    assert m.admit(named("y")).result.admitted
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1")), ("y", ("shop", "web-y"))]


def test_an_inert_name_of_an_older_container_map_never_comes_back(tmp_path: Path) -> None:
    """An older numamem's map names z, whose state a crash lost. z admitted again without a
    name wrote the state before the map (no ids added); the map's rename failed, which the
    store took as written (its stale ids are inert): z's old name came back at restart."""
    m = manager(tmp_path)
    assert m.admit(named("a")).result.admitted
    m.store.close()
    (tmp_path / NAMES_FILE).unlink()
    legacy = {"a": ("shop", "web-a"), "z": ("shop", "web-z")}
    (tmp_path / CONTAINERS_FILE).write_bytes(encode_containers({}, legacy))
    faults: dict[str, tuple[str, str]] = {}
    again = manager(tmp_path, faults=failing(faults))
    assert again.pod_names() == {"a": ("shop", "web-a")}
    faults["map"] = ("rename", CONTAINERS_FILE)
    with contextlib.suppress(PersistenceError):
        again.admit(named("z", ""))
    assert again.pod_names() == {"a": ("shop", "web-a")}
    assert restart_names(tmp_path) == [("a", ("shop", "web-a"))]
    assert again.admit(named("z", "")).result.admitted
    assert "z" in again.committed().view.get_memory_assignments()
    assert restart_names(tmp_path) == [("a", ("shop", "web-a"))]
    assert read_container_file((tmp_path / CONTAINERS_FILE).read_bytes()).names == {}


def test_names_recorded_beside_a_removed_state_file_stay_inert(tmp_path: Path) -> None:
    """The state file removed (as a refused start's message says to do): every recorded name
    is inert, in the names file or in an older map, and a pod admitted again without its
    name must not get it back."""
    m = manager(tmp_path)
    assert m.admit(named("x")).result.admitted
    m.store.close()
    (tmp_path / STATE_FILE).unlink()
    again = manager(tmp_path)
    assert again.admit(named("x", "")).result.admitted
    assert again.pod_names() == {}
    assert restart_names(tmp_path) == []
    again.store.close()
    (tmp_path / STATE_FILE).unlink()
    (tmp_path / NAMES_FILE).unlink()
    (tmp_path / CONTAINERS_FILE).write_bytes(encode_containers({}, {"x": ("shop", "web-x")}))
    third = manager(tmp_path)
    assert third.admit(named("x", "")).result.admitted
    assert restart_names(tmp_path) == []


def test_a_name_whose_append_failed_at_its_fsync_never_names_the_pod_later(
    tmp_path: Path,
) -> None:
    """The record is in the file (only its fsync failed) and x has no state: its name is inert
    and must not come back when x gets state without a name (the append's failure makes the
    next save fold). The fault matrix and the random sequences did not catch its removal."""
    m = failed_named_admission(tmp_path, ("append-fsync", NAMES_FILE))
    assert m.admit(named("x", "")).result.admitted
    assert m.pod_names() == {"u1": ("shop", "web-u1")}
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1"))]


def test_a_fold_renamed_before_a_failed_state_rename_never_names_the_pod_later(
    tmp_path: Path,
) -> None:
    """The fold holds x's name, the state's rename failed: the file names x, memory does not,
    so the next save folds again (``stale``); nothing else caught its removal."""
    faults: dict[str, tuple[str, str]] = {"state": ("rename", STATE_FILE)}
    m = manager(tmp_path, faults=failing({}))
    m.store.faults = failing(faults)
    with pytest.raises(PersistenceError):
        m.admit(named("x"))  # the first name: a fold, renamed first
    assert m.admit(named("x", "")).result.admitted
    assert m.pod_names() == {}
    assert restart_names(tmp_path) == []


def test_an_empty_names_file_is_folded_before_names_are_appended_to_it(tmp_path: Path) -> None:
    """An empty file (truncated outside numamem) replays to no names and is not damaged; but
    records appended to it have no header before them, so the next restart found "not a pod
    names file" and set aside every acknowledged name."""
    m = manager(tmp_path)
    assert m.admit(named("u1", "")).result.admitted
    m.store.close()
    (tmp_path / NAMES_FILE).write_bytes(b"")
    again = manager(tmp_path)
    assert again.admit(named("u2")).result.admitted
    assert again.admit(named("u3")).result.admitted
    assert restart_names(tmp_path) == [("u2", ("shop", "web-u2")), ("u3", ("shop", "web-u3"))]


def test_the_reader_never_raises_on_a_record_nested_too_deep(tmp_path: Path) -> None:
    """read_names "never raises on bad content": a well-framed record of deeply nested JSON
    raised RecursionError (the daemon's start and ``numamem state show`` failed on it)."""
    data = encode_names({"a": ("ns", "x")}) + frame(b"[" * 100_000)
    found = read_names(data, tmp_path / NAMES_FILE)
    assert found.names == {"a": ("ns", "x")} and found.damage is not None
