"""SIGKILL the daemon at random points under concurrent load; nothing acknowledged is lost, nothing
half-applied (see tests/crash_harness.py). ``make soak`` runs the same harness for longer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash_harness import run

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_kills_lose_nothing(short_root: Path, seed: int) -> None:
    report = run(short_root, seed, rounds=3)
    assert report.kills == 3
    assert report.operations > 20, report.summary()
    assert report.resizes > 0, report.summary()
    assert report.lost == []
    assert report.violations == []
