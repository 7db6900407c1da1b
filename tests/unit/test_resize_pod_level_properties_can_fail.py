"""test_pod_level_resize_sequences (tests/unit/test_resize_pod_level_properties.py) can fail:
a refused resize that writes the state file (the bug ``resize_worlds.unchanged_if_refused``
exists to catch) fails the property test on a "fault" op exactly as on a "resize" op. Both
tests mutate the manager so that a refusal rewrites the state file and run the property
test's body on one fixed world. (Review 40b: the faulted write's ``except Exception``
branch caught the check's AssertionError on "fault" ops, so such a bug passed.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from numamem.errors import ResizeError
from numamem.memorymanager.manager.writes import Manager
from numamem.topology import Machine, NUMANode
from tests.unit import test_resize_pod_level_properties as t

GI = 1024**3


def world(kind: str) -> t.World:
    """One 4Gi node, one pod-level pod of 1 unit admitted, then ``kind`` on it resizing its
    budget to 28 units (a=1: only the budget changes; b=27: 14Gi, more than the node),
    which the manager refuses."""
    machine = Machine((NUMANode(0, 4 * GI, (), cpus=(0,), distances=(10,)),))
    spec = t.Spec("pod-0", (1, 0), (("c0", "app", 0, 0),))
    return t.World(
        machine, "single-numa-node", [spec], [("admit", 0, 0, 0, 0), (kind, 0, 1, 27, 0)]
    )


@pytest.fixture
def refusals_write(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Manager.resize mutated: a refused resize rewrites its state file (same JSON, one
    more trailing newline) before raising; returns the verdicts it refused with."""
    real = Manager.resize
    refused: list[str] = []

    def resize(self: Manager, *args: Any, **kwargs: Any) -> Any:
        try:
            return real(self, *args, **kwargs)
        except ResizeError as err:
            refused.append(err.verdict)
            path: Path = self._versions.store.state_path  # type: ignore[attr-defined]
            path.write_bytes(path.read_bytes() + b"\n")
            raise

    monkeypatch.setattr(Manager, "resize", resize)
    return refused


def run(kind: str) -> None:
    """The property test's body on ``world(kind)`` alone, under hypothesis (its events)."""
    body = t.test_pod_level_resize_sequences.hypothesis.inner_test  # type: ignore[attr-defined]
    once = settings(max_examples=1, database=None, deadline=None, phases=[Phase.generate])
    once(given(st.just(world(kind)))(body))()


@pytest.mark.parametrize("kind", ["resize", "fault"])  # resize: the control
def test_a_refusal_that_writes_fails_the_property(kind: str, refusals_write: list[str]) -> None:
    with pytest.raises(AssertionError, match="a refused resize wrote"):
        run(kind)
    assert refusals_write  # the resize was refused: the check had something to catch
