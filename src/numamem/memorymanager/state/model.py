"""Memory manager state: the state interfaces and the in-memory state (kubelet ``state``).

The value types (tables, node states, blocks) are in :mod:`numamem.memtypes`.

A state is the kubelet's machine state, container assignments and pod-level
assignments (``podEntries``, KEP-5526), plus one record of numamem's own: which
containers of a pod allocated as a whole hold memory of their own
(:meth:`MemoryState.exclusive_containers`; the podresources API and GetMemory report
the others as sharing the pod's pool). The Static policy's init-container reuse is
derived from the stored blocks (:func:`numamem.memorymanager.policy.reuse.reusable_memory`),
so a restart restores it.

Copy rules:

* :class:`~numamem.memtypes.Block` is immutable; a container's blocks are a tuple.
* The per-pod container maps and the node states inside a :class:`MemoryState`
  are never mutated in place, only replaced (a writer changes copies of the
  nodes it touches, :func:`~numamem.memorymanager.state.arithmetic.copy_for_write`,
  and hands the new mapping over with :meth:`MemoryState.adopt_machine_state`);
  so a state is forked for a transaction by copying two dicts
  (:meth:`MemoryState.fork`), whatever the number of NUMA nodes.
* Readers get copies: :meth:`MemoryState.get_machine_state` returns a deep
  clone, :meth:`MemoryState.get_memory_blocks` a new list.
* A committed state is never mutated again; :class:`StateView` is the
  read-only face the manager gives everyone outside it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol

from numamem.memtypes import (
    Block,
    ContainerBlocks,
    MachineState,
    NUMANodeState,
    clone_machine_state,
)


class StateReader(Protocol):
    """Read-only view of the memory manager state (kubelet ``state.Reader``)."""

    def get_machine_state(self) -> MachineState:
        """A deep copy the caller may change."""

    def machine_view(self) -> Mapping[int, NUMANodeState | None]:
        """The live machine state, not copied: callers must not mutate it."""

    def get_memory_blocks(self, pod_uid: str, container_name: str) -> list[Block] | None: ...

    def get_memory_assignments(self) -> dict[str, dict[str, list[Block]]]: ...

    def get_pod_memory_blocks(self, pod_uid: str) -> list[Block] | None:
        """The pod-level blocks (a copy), or None when the pod has no pod-level entry."""

    def get_pod_memory_assignments(self) -> dict[str, list[Block]]: ...

    def exclusive_containers(self, pod_uid: str) -> frozenset[str]: ...

    def exclusive_known(self, pod_uid: str) -> bool:
        """Whether :meth:`exclusive_containers` is a record (possibly empty: every container
        shares the pool) or unknown (a pod restored from a kubelet's file)."""


class State(StateReader, Protocol):
    """Reader plus writers (kubelet ``state.State``); policies work on this."""

    def set_machine_state(self, ms: Mapping[int, NUMANodeState | None]) -> None:
        """Store a deep copy of ``ms``."""

    def adopt_machine_state(self, ms: MachineState) -> None:
        """Store ``ms`` itself (no copy): the caller hands it over and must not touch it again."""

    def set_memory_blocks(self, pod_uid: str, container_name: str, blocks: list[Block]) -> None: ...

    def delete(self, pod_uid: str, container_name: str) -> None: ...

    def container_names(self, pod_uid: str) -> list[str]:
        """The pod's containers with an entry (in no particular order)."""

    def set_pod_memory_blocks(
        self, pod_uid: str, blocks: Sequence[Block], exclusive: Collection[str] | None = ()
    ) -> None:
        """Store the pod-level entry and which of its containers hold memory of their own
        (None: unknown)."""

    def delete_pod(self, pod_uid: str) -> None:
        """Remove the pod-level entry (the newest kubelet's ``DeletePod``: containers stay)."""


class MemoryState:
    """In-memory :class:`State`. Not thread-safe: the manager serialises access."""

    __slots__ = ("_exclusive", "_machine", "_pod_blocks", "_pods")

    def __init__(
        self,
        machine: Mapping[int, NUMANodeState | None] | None = None,
        assignments: Mapping[str, Mapping[str, list[Block] | tuple[Block, ...]]] | None = None,
        pod_entries: Mapping[str, Sequence[Block]] | None = None,
        exclusive: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self._machine: MachineState = clone_machine_state(machine or {})
        self._pods: dict[str, dict[str, ContainerBlocks]] = {
            pod: {ctr: tuple(blocks) for ctr, blocks in ctrs.items()}
            for pod, ctrs in (assignments or {}).items()
        }
        self._pod_blocks: dict[str, ContainerBlocks] = {
            pod: tuple(blocks) for pod, blocks in (pod_entries or {}).items()
        }
        self._exclusive: dict[str, frozenset[str]] = {
            pod: frozenset(names)
            for pod, names in (exclusive or {}).items()
            if pod in self._pod_blocks
        }

    # --- reader -------------------------------------------------------------

    def get_machine_state(self) -> MachineState:
        return clone_machine_state(self._machine)

    def get_memory_blocks(self, pod_uid: str, container_name: str) -> list[Block] | None:
        """A copy of the blocks, or None if the container has no entry (an empty entry is [])."""
        blocks = self._pods.get(pod_uid, {}).get(container_name)
        return None if blocks is None else list(blocks)

    def get_memory_assignments(self) -> dict[str, dict[str, list[Block]]]:
        return {pod: {ctr: list(b) for ctr, b in ctrs.items()} for pod, ctrs in self._pods.items()}

    def get_pod_memory_blocks(self, pod_uid: str) -> list[Block] | None:
        blocks = self._pod_blocks.get(pod_uid)
        return None if blocks is None else list(blocks)

    def get_pod_memory_assignments(self) -> dict[str, list[Block]]:
        return {pod: list(blocks) for pod, blocks in self._pod_blocks.items()}

    def exclusive_containers(self, pod_uid: str) -> frozenset[str]:
        """The containers of a pod allocated as a whole that hold memory of their own (the
        others share its pool); empty when unknown (a pod restored from a kubelet's file)."""
        return self._exclusive.get(pod_uid, frozenset())

    def exclusive_known(self, pod_uid: str) -> bool:
        return pod_uid in self._exclusive

    # --- cheap, non-copying access for the manager and the codec ------------

    def machine_view(self) -> Mapping[int, NUMANodeState | None]:
        """The live machine state. Callers must not mutate it."""
        return self._machine

    def pods_view(self) -> Mapping[str, Mapping[str, ContainerBlocks]]:
        """The live assignments. Callers must not mutate them."""
        return self._pods

    def pod_entries_view(self) -> Mapping[str, ContainerBlocks]:
        """The live pod-level assignments. Callers must not mutate them."""
        return self._pod_blocks

    def exclusive_view(self) -> Mapping[str, frozenset[str]]:
        """The live record of :meth:`exclusive_containers`. Callers must not mutate it."""
        return self._exclusive

    def container_names(self, pod_uid: str) -> list[str]:
        return list(self._pods.get(pod_uid, ()))

    def iter_containers(self) -> Iterator[tuple[str, str, ContainerBlocks]]:
        for pod, ctrs in self._pods.items():
            for ctr, blocks in ctrs.items():
                yield pod, ctr, blocks

    def pod_count(self) -> int:
        return len(self._pods)

    # --- writer -------------------------------------------------------------

    def set_machine_state(self, ms: Mapping[int, NUMANodeState | None]) -> None:
        self._machine = clone_machine_state(ms)

    def adopt_machine_state(self, ms: MachineState) -> None:
        self._machine = ms

    def set_memory_blocks(self, pod_uid: str, container_name: str, blocks: list[Block]) -> None:
        ctrs = dict(self._pods.get(pod_uid, {}))
        ctrs[container_name] = tuple(blocks)
        self._pods[pod_uid] = ctrs

    def set_memory_assignments(self, assignments: Mapping[str, Mapping[str, list[Block]]]) -> None:
        self._pods = {
            pod: {c: tuple(b) for c, b in ctrs.items()} for pod, ctrs in assignments.items()
        }

    def delete(self, pod_uid: str, container_name: str) -> None:
        """Remove one container's entry; the pod entry goes when its last container does."""
        ctrs = self._pods.get(pod_uid)
        if ctrs is None or container_name not in ctrs:
            return
        remaining = {c: b for c, b in ctrs.items() if c != container_name}
        if remaining:
            self._pods[pod_uid] = remaining
        else:
            del self._pods[pod_uid]

    def set_pod_memory_blocks(
        self, pod_uid: str, blocks: Sequence[Block], exclusive: Collection[str] | None = ()
    ) -> None:
        self._pod_blocks[pod_uid] = tuple(blocks)
        if exclusive is not None:  # a record, even empty: numamem allocated the pod
            self._exclusive[pod_uid] = frozenset(exclusive)
        else:
            self._exclusive.pop(pod_uid, None)

    def delete_pod(self, pod_uid: str) -> None:
        self._pod_blocks.pop(pod_uid, None)
        self._exclusive.pop(pod_uid, None)

    def clear_state(self) -> None:
        self._machine = {}
        self._pods = {}
        self._pod_blocks = {}
        self._exclusive = {}

    # --- transactions -------------------------------------------------------

    def fork(self) -> MemoryState:
        """An independent copy that shares the (immutable) per-pod container maps."""
        other = MemoryState.__new__(MemoryState)
        other._machine = dict(self._machine)  # node states are copied on write
        other._pods = dict(self._pods)
        other._pod_blocks = dict(self._pod_blocks)
        other._exclusive = dict(self._exclusive)
        return other

    def same_as(self, other: MemoryState) -> bool:
        """Whether two states hold equal machine state and assignments (what is persisted)."""
        return (
            self._machine == other._machine
            and self._pods == other._pods
            and self._pod_blocks == other._pod_blocks
            and self._exclusive == other._exclusive
        )


class StateView:
    """A read-only view of one committed :class:`MemoryState` (kubelet ``state.Reader``).

    The state behind it is never mutated, so the view needs no lock and never
    changes. Readers get copies of the machine state and read-only mappings of
    the assignments (their blocks are immutable).
    """

    __slots__ = ("_state",)

    def __init__(self, state: MemoryState) -> None:
        self._state = state

    def get_machine_state(self) -> MachineState:
        return self._state.get_machine_state()

    def machine_view(self) -> Mapping[int, NUMANodeState | None]:
        return MappingProxyType(self._state.machine_view())

    def get_memory_blocks(self, pod_uid: str, container_name: str) -> list[Block] | None:
        return self._state.get_memory_blocks(pod_uid, container_name)

    def get_memory_assignments(self) -> dict[str, dict[str, list[Block]]]:
        return self._state.get_memory_assignments()

    def get_pod_memory_blocks(self, pod_uid: str) -> list[Block] | None:
        return self._state.get_pod_memory_blocks(pod_uid)

    def get_pod_memory_assignments(self) -> dict[str, list[Block]]:
        return self._state.get_pod_memory_assignments()

    def pod_entries(self) -> Mapping[str, ContainerBlocks]:
        """Pod uid -> pod-level blocks (read-only, not copied)."""
        return MappingProxyType(self._state.pod_entries_view())

    def exclusive_containers(self, pod_uid: str) -> frozenset[str]:
        return self._state.exclusive_containers(pod_uid)

    def exclusive_known(self, pod_uid: str) -> bool:
        return self._state.exclusive_known(pod_uid)

    def pods(self) -> Iterator[tuple[str, Mapping[str, ContainerBlocks]]]:
        """(pod uid, container name -> blocks) for every pod, without copying the blocks."""
        for pod, ctrs in self._state.pods_view().items():
            yield pod, MappingProxyType(ctrs)

    def has_pod(self, pod_uid: str) -> bool:
        return pod_uid in self._state.pods_view()

    def pod_count(self) -> int:
        return self._state.pod_count()

    def container_count(self) -> int:
        return sum(len(ctrs) for ctrs in self._state.pods_view().values())

    def same_as(self, other: StateView) -> bool:
        return self._state.same_as(other._state)
