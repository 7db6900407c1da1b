"""Fast paths of the Allocate path against the definitions they replace (hypothesis)."""

from __future__ import annotations

import os
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numamem.checkpoint import filestore
from numamem.errors import AllocationError, SearchBudgetError
from numamem.memorymanager.requests.resources import _bytes
from numamem.quantity import Quantity
from numamem.work import Work


def _bytes_reference(q: Quantity) -> int:
    """The definition: the Fraction compared as a Fraction."""
    if q.value.denominator != 1 or not (-(1 << 63) <= q.value < (1 << 63)):
        raise AllocationError("[memorymanager] failed to represent quantity as int64")
    if q.value < 0:
        raise AllocationError(f"[memorymanager] a memory request may not be negative, got {q}")
    return int(q.value)


def _outcome(q: Quantity, f: Callable[[Quantity], int]) -> tuple[str, object]:
    try:
        return "value", f(q)
    except AllocationError as err:
        return "error", str(err)


@given(
    st.one_of(
        st.integers(-(1 << 65), 1 << 65),
        st.sampled_from([(1 << 63) - 1, 1 << 63, -(1 << 63), -(1 << 63) - 1, 0, -1]),
    ),
    st.sampled_from([1, 1, 2, 3, 10**9]),
)
def test_request_bytes_is_the_fraction_definition(numerator: int, denominator: int) -> None:
    q = Quantity(Fraction(numerator, denominator))
    assert _outcome(q, _bytes) == _outcome(q, _bytes_reference)


def test_request_bytes_texts() -> None:
    with pytest.raises(AllocationError, match="failed to represent quantity as int64"):
        _bytes(Quantity(Fraction(1, 2)))
    with pytest.raises(AllocationError, match="may not be negative"):
        _bytes(Quantity(Fraction(-5)))


def test_work_stage_gives_the_outer_name_back_however_the_block_is_left() -> None:
    """Work.stage is a class now, not a contextlib generator: leaving a block, normally or by
    an exception, names the outer input again (a later refusal must not name a stage that
    ended)."""
    work = Work(limit=10)
    with work.stage("pod a: the hints"):
        with work.stage(lambda: "pod a: the allocation"):
            assert work.what == "pod a: the allocation"
        assert work.what == "pod a: the hints"
        with (
            pytest.raises(SearchBudgetError, match=r"^pod a: the merge: the search needs"),
            work.stage("pod a: the merge"),
        ):
            work.spend(11)
        assert work.what == "pod a: the hints"
    assert work.what == "the search"
    with pytest.raises(SearchBudgetError, match=r"^the search: the search needs"):
        work.spend()


def test_temp_names_are_per_target_and_per_process_after_a_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept temp-name prefixes (a23d41d) name the target's directory and the process: a
    forked child, whose cache is a copy of its parent's, names its temps with its own pid
    (two processes writing one target must not draw the same names: O_EXCL would refuse
    the write). The child is simulated by its pid: os.fork() in a process with threads
    warns on Python 3.12, and warnings are errors here."""
    path, other = tmp_path / "state", tmp_path / "sub" / "state"
    run, parent = filestore._RUN, os.getpid()
    first, second = filestore._temp_name(path), filestore._temp_name(path)
    assert first.startswith(f"{tmp_path}/.state.tmp-{parent:x}{run}-")
    assert first != second
    assert filestore._temp_name(other).startswith(f"{tmp_path}/sub/.state.tmp-{parent:x}")
    child = parent + 1
    monkeypatch.setattr(os, "getpid", lambda: child)  # the same cache, in a forked child
    assert filestore._temp_name(path).startswith(f"{tmp_path}/.state.tmp-{child:x}{run}-")
