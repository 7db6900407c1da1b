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


@pytest.mark.parametrize("seed", [4, 5])
def test_random_kills_with_pod_level_pods_lose_nothing(short_root: Path, seed: int) -> None:
    """The same with the pod-level gates in the pod scope, half the pods set pod-level resources:
    a pod-level entry is on disk exactly when its containers are."""
    report = run(short_root, seed, rounds=3, pod_level=True)
    assert report.kills == 3
    assert report.operations > 20, report.summary()
    assert report.pod_level_seen > 0, report.summary()
    assert report.lost == []
    assert report.violations == []
