"""tests/data holds verbatim copies of the reference set; this is the one place that compares them.

The reference set (upstream scenarios, checkpoint fixtures, specifications) is
checked out beside the repository as ``../shared`` on the machines where the
copies were made. A user's clone has nothing beside it: there the comparison
is skipped, saying why, and everything else in the suite reads tests/data only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemon import DATA, REPO

REFERENCE = REPO.parent / "shared"
COPIES = {
    "kubelet-cases": "cases/kubelet",
    "metacache-cases": "cases/metacache",
    "kubelet-checkpoints": "fixtures/kubelet-checkpoints",
}

pytestmark = pytest.mark.skipif(
    not REFERENCE.is_dir(),
    reason=f"no reference set at {REFERENCE} to compare tests/data with (a plain clone has none)",
)


@pytest.mark.parametrize(("copy", "original"), sorted(COPIES.items()))
def test_copies_equal_the_reference_set(copy: str, original: str) -> None:
    ours, theirs = DATA / copy, REFERENCE / original
    names = sorted(p.name for p in ours.iterdir())
    assert names == sorted(p.name for p in theirs.iterdir()), f"{copy} vs {theirs}"
    for name in names:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), f"{copy}/{name}"


def test_own_rule_checkpoint_examples_are_the_specified_ones() -> None:
    """The two example checkpoints appear verbatim in the memory manager specification."""
    spec = (REFERENCE / "spec" / "memory-manager.md").read_text()
    examples = sorted(Path(DATA / "checkpoint-examples").iterdir())
    assert [p.name for p in examples] == ["v1_4050994722.json", "v3_1844076009.json"]
    for path in examples:
        assert f"```json\n{path.read_text()}\n```" in spec, path.name
