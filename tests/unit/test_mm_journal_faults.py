"""The fault matrix of the memory manager's journal mode (``--state-commit=journal``).

The same daemon and rules as :mod:`tests.unit.test_fault_matrix` (in process, the
podresources names on), with the memory manager committing to ``numamem_state_journal``.
Steps:

* ``admit``, ``add-id``, ``remove-id``: one record appended (``append``, ``append-fsync``,
  the cut-off after a failure: ``truncate``, ``truncate-fsync``; a torn prefix);
* ``admit-reopen``: the journal's descriptor closed first, so the append opens it;
* ``settle``: the journal poisoned first (an append and its cut-off both fail), so the next
  change writes the map, the state and a fresh journal before its record;
* ``compact``: a compaction right after an acknowledged append (the change stays
  acknowledged whatever fails in it);
* ``revive``: the pod names folded (their own atomic write ahead of the record);
* ``swap-retry``: a compaction whose directory sync failed, then a change whose retried
  directory sync fails too.

Each stage fails with EMFILE, ENOSPC, EIO, EBADF or an exception that is not an OSError.
After each cell, as in the replace mode's matrix: reads answer, memory equals what a
restart reads, a failure that says "not applied" is absent after a restart, an
acknowledged change is present, and once the fault goes the next change succeeds, health
is SERVING and no descriptor leaked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from numamem.checkpoint.fs import REAL
from numamem.checkpoint.mmjournal import JOURNAL_FILE as MM_JOURNAL
from numamem.checkpoint.mmstore import CONTAINERS_FILE
from numamem.checkpoint.mmstore import STATE_FILE as MM_FILE
from numamem.checkpoint.namesfile import NAMES_FILE
from tests.unit.test_fault_matrix import (
    ATOMIC,
    FAULTS,
    NOT_SERVING,
    SERVING,
    SHORT,
    Cell,
    Harness,
    Outcome,
    ShortWrites,
    harness,
    injector,
    pod,
    run,
)


def cells() -> list[Cell]:
    out = [Cell(MM_JOURNAL, "admit", s) for s in ("append", "append-fsync")]
    out += [
        Cell(MM_JOURNAL, "admit", "truncate", ("append-fsync",)),
        Cell(MM_JOURNAL, "admit", "truncate", ("append",)),
        Cell(MM_JOURNAL, "admit", "truncate-fsync", ("append-fsync",)),
    ]
    out += [Cell(MM_JOURNAL, "admit-reopen", "open")]
    out += [
        Cell(MM_JOURNAL, step, s)
        for step in ("add-id", "remove-id")
        for s in ("append", "append-fsync")
    ]
    out += [Cell(f, "settle", s) for f in (CONTAINERS_FILE, MM_FILE, MM_JOURNAL) for s in ATOMIC]
    out += [Cell(f, "compact", s) for f in (CONTAINERS_FILE, MM_FILE, MM_JOURNAL) for s in ATOMIC]
    out += [Cell(NAMES_FILE, "revive", s) for s in ATOMIC]
    out += [Cell(MM_JOURNAL, "admit", SHORT), Cell(MM_JOURNAL, "admit", SHORT, ("truncate",))]
    out += [Cell(MM_JOURNAL, "swap-retry", "dirsync-retry")]
    return out


MATRIX = [(cell, fault) for cell in cells() for fault in FAULTS]


def test_matrix_size_is_printed(report: list[str]) -> None:
    report.append(
        f"fault matrix, memory manager journal mode: {len(cells())} steps x {len(FAULTS)} "
        f"faults = {len(MATRIX)} cells"
    )
    assert len(MATRIX) == len(cells()) * len(FAULTS) >= 200


def poison(h: Harness) -> None:
    """An admission whose append and cut-off both fail: not applied, and the journal may end
    in a torn record, so the next change settles first."""

    h.store.faults = injector(Cell(MM_JOURNAL, "poison", "append", ("truncate",)), "EIO")
    outcome = run(lambda: h.client.admit(pod("poisoned")))
    assert outcome.reason == "CHECKPOINT_WRITE_FAILED", outcome
    h.store.faults = None
    assert h.store.journal.needs_settle
    assert h.same()


def swap_dirsync_unknown(h: Harness) -> None:
    """A compaction whose directory sync fails: the change that compacted is acknowledged
    (its record is durable whatever the renames left), and the next change owes the sync."""

    h.store.faults = injector(Cell(MM_JOURNAL, "swap", "dirsync"), "EIO")
    always_compact(h)
    assert h.client.admit(pod("compacted")).admitted
    del h.store.journal.should_compact
    h.store.faults = None
    assert h.store.journal.directory_unknown is not None
    assert "compacted" in dict(h.manager_restart()[0])  # type: ignore[call-overload]


def always_compact(h: Harness) -> None:
    h.store.journal.should_compact = lambda: True  # type: ignore[method-assign]


def present(h: Harness, uid: str) -> Callable[[], bool]:
    return lambda: uid in dict(h.manager_restart()[0])  # type: ignore[call-overload]


def the_step(h: Harness, cell: Cell) -> tuple[Callable[[], object], Callable[[], bool]]:
    client = h.client
    if cell.step == "admit-reopen":
        h.store.close()  # compacts, and closes the journal's descriptor
    if cell.step == "settle":
        poison(h)
    if cell.step == "compact":
        always_compact(h)
    if cell.step == "swap-retry":
        swap_dirsync_unknown(h)
    if cell.step == "add-id":
        return lambda: client.add_container(pod("a"), "c", "cid-a2"), (
            lambda: "cid-a2" in h.manager_restart()[2]  # type: ignore[operator]
        )
    if cell.step == "remove-id":
        return lambda: client.remove_container("cid-a"), lambda: not present(h, "a")()
    if cell.step == "revive":
        assert client.admit(pod("b")).admitted
        client.release_pod("b")
        nameless = pod("b")
        nameless.namespace = nameless.name = ""
        return lambda: client.admit(nameless), present(h, "b")
    return lambda: client.admit(pod("new")), present(h, "new")


@pytest.mark.parametrize(("cell", "fault"), MATRIX, ids=[f"{c}-{f}" for c, f in MATRIX])
def test_a_fault_in_journal_mode_loses_nothing_and_wedges_nothing(
    tmp_path: Path, cell: Cell, fault: str
) -> None:
    with harness(tmp_path, state_commit="journal") as h:
        client = h.client
        assert client.admit(pod("a")).admitted
        client.add_container(pod("a"), "c", "cid-a")
        before_fds = h.state_dir_fds()
        call, changed_now = the_step(h, cell)
        before = h.manager_restart()
        h.store.faults = injector(cell, fault)
        if cell.stage == SHORT:
            h.store.fs = ShortWrites(cell.file, FAULTS[fault])
        outcome = run(call)

        client.timeout = 2
        client.get_state()
        health = client.check_health()
        if outcome.reason == "DURABILITY_UNKNOWN":
            assert health == NOT_SERVING, (outcome, health)
        assert h.same(), outcome  # memory equals what a restart reads
        if outcome.code is not None and outcome.reason != "DURABILITY_UNKNOWN":
            assert outcome.code == grpc.StatusCode.UNAVAILABLE, outcome
            assert outcome.reason == "CHECKPOINT_WRITE_FAILED", outcome
            assert "not applied" in outcome.details, outcome
        changed = changed_now()
        if outcome.acknowledged:
            assert changed, outcome
        elif outcome.reason == "CHECKPOINT_WRITE_FAILED":
            assert not changed, outcome
            assert h.manager_restart() == before, outcome
        if cell.step == "compact":  # a compaction's failure never fails the change
            assert outcome == Outcome(True), outcome
        if cell.step in ("settle", "revive") and cell.stage != "dirsync":
            # Each stage of those writes but the directory sync (which the record's append
            # retries) fails the change.
            assert not outcome.acknowledged, outcome

        h.store.faults = None
        h.store.fs = REAL
        vars(h.store.journal).pop("should_compact", None)
        assert client.admit(pod("after")).admitted
        assert h.same()
        assert client.check_health() == SERVING
        assert h.state_dir_fds() == before_fds
