"""What the resize property tests (test_resize_properties.py, test_resize_sequences.py,
test_resize_pod_level_properties.py) share: their fake machines, their settings, the
incarnations of the pods of a sequence and the checks of a refused resize. Each test draws
its own pods and operations on them."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

from numamem.errors import ResizeError
from numamem.pod import Pod
from numamem.topology import HugePagePool, Machine, NUMANode
from tests.properties import examples

GI = 1024**3
HP_1G = 1048576
"""The 1Gi hugepage size in KiB, as sysfs names it."""
DISTANCES = st.integers(11, 40)
"""SLIT distances between two nodes (10: a node to itself)."""


@st.composite
def machines(
    draw: st.DrawFn,
    nodes: st.SearchStrategy[int],
    memory_gib: st.SearchStrategy[int],
    pages: st.SearchStrategy[int],
    distances: st.SearchStrategy[int] = DISTANCES,
    pages_in_memory: bool = False,
) -> Machine:
    """A machine of ``nodes`` NUMA nodes; node i has CPU i, ``memory_gib`` GiB of memory
    (plus its pages' GiB when ``pages_in_memory``), ``pages`` free 1Gi hugepages, and a
    drawn symmetric distance to every other node (10 to itself)."""
    count = draw(nodes)
    table = [[10 if a == b else 0 for b in range(count)] for a in range(count)]
    for a, b in itertools.combinations(range(count), 2):
        table[a][b] = table[b][a] = draw(distances)
    out = []
    for i in range(count):
        free = draw(pages)
        memory = draw(memory_gib) + (free if pages_in_memory else 0)
        pools = (HugePagePool(HP_1G, free, free),) if free else ()
        out.append(NUMANode(i, memory * GI, pools, cpus=(i,), distances=tuple(table[i])))
    return Machine(tuple(out))


def slow_settings(make_test: int) -> settings:
    """The settings of a property test whose examples run a manager on files: ``make_test``
    examples in ``make test`` (:func:`tests.properties.examples`), no deadline."""
    return settings(
        max_examples=examples(make_test),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


class Spec(Protocol):
    """A drawn pod: a dataclass with a ``uid``."""

    uid: str


S = TypeVar("S", bound=Spec)


class Incarnations(Generic[S]):
    """The pods of a sequence, by the index of their drawn spec. Each admission of a drawn
    pod is a new incarnation with a uid of its own (``pod-0-1``, ``pod-0-2``, ...), so a pod
    released and admitted again is a new pod to the manager."""

    def __init__(self, drawn: Sequence[S]) -> None:
        self.drawn = drawn
        self.live: dict[str, S] = {}
        """The live (admitted) incarnations by uid; a test replaces one it resized."""
        self._uid: dict[int, str] = {}
        self._index: dict[str, int] = {}
        self._generation = 0

    def steps(
        self, ops: Iterable[tuple[Any, ...]]
    ) -> Iterator[tuple[str, S | None, tuple[Any, ...]]]:
        """Each op ``(kind, pod index, numbers...)`` as it applies, ``(kind, spec, numbers)``:
        ``admit`` with a new incarnation when the op admits or acts on a pod that is not live
        (a restart aside); none when it admits a live pod; else the op's kind with the live
        incarnation (None: a restart with that pod not live)."""
        for kind, index, *numbers in ops:
            spec = self.live.get(self._uid.get(index, ""))
            if kind == "admit" or (spec is None and kind != "restart"):
                if spec is None:
                    self._generation += 1
                    drawn = self.drawn[index]
                    fresh = replace(drawn, uid=f"{drawn.uid}-{self._generation}")  # type: ignore[type-var]
                    self._index[fresh.uid] = index
                    yield "admit", fresh, tuple(numbers)
                continue
            yield kind, spec, tuple(numbers)

    def admitted(self, spec: S) -> None:
        """``spec`` (from :meth:`steps`) is live."""
        self.live[spec.uid] = spec
        self._uid[self._index[spec.uid]] = spec.uid

    def released(self, spec: S) -> None:
        """``spec`` is no longer live."""
        del self.live[spec.uid], self._uid[self._index.pop(spec.uid)]


class Committing(Protocol):
    def committed(self) -> object: ...


@contextmanager
def unchanged_if_refused(manager: Committing, path: Path) -> Iterator[object]:
    """Yields the manager's committed state; a :class:`ResizeError` raised in the block must
    have left that state (the same object) and the bytes of the state file ``path`` as they
    were. The error goes on, its verdict counted as a hypothesis event."""
    before, file_before = manager.committed(), path.read_bytes()
    try:
        yield before
    except ResizeError as err:
        event(f"refused {err.verdict}")
        assert manager.committed() is before, "a refused resize changed the state"
        assert path.read_bytes() == file_before, "a refused resize wrote"
        raise


class Resizing(Protocol):
    def reader(self) -> Any: ...
    def release_pod(self, pod_uid: str) -> object: ...
    def resize(self, pod: Pod, container_name: str) -> object: ...


@contextmanager
def alone(directory: str, uid: str, start: Callable[[str], Resizing]) -> Iterator[Resizing]:
    """The manager ``start`` opens on a copy of the files in ``directory``, every pod but
    ``uid`` released; the copy is removed after the block."""
    copy = tempfile.mkdtemp(prefix="nm")
    try:
        shutil.copytree(directory, copy, dirs_exist_ok=True)
        manager = start(copy)
        for other in list(manager.reader().get_memory_assignments()):
            if other != uid:
                manager.release_pod(other)
        yield manager
    finally:
        shutil.rmtree(copy)


def assert_honest(alone: Resizing, pod: Pod, name: str, err: ResizeError) -> None:
    """The verdict of ``err`` (the refusal of ``pod``'s resize) is honest: with every other
    pod released (``alone``), a Deferred resize fits and an Infeasible one is still refused
    as Infeasible."""
    if err.verdict == "Deferred":
        alone.resize(pod, name)
        return
    try:
        alone.resize(pod, name)
    except ResizeError as again:
        assert again.verdict == "Infeasible", str(again)
    else:
        raise AssertionError(f"fits alone: {err}")
