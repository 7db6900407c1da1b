"""In-place resize of a container's pinned memory (issue 30): a numamem extension.

Deviation from upstream: the kubelet's Static policy cannot resize pinned memory (it
ignores every operation but Add, kubernetes#140224; #131360, #128068; the gate
``InPlacePodVerticalScalingExclusiveMemory`` is off by default and the resize KEP,
enhancements#5294, is stale). numamem resizes it, by these rules, on the pod as the API
server accepted the resize:

* the pod stays Guaranteed and only ``memory`` changes (the API server forbids a QoS
  change and a hugepage resize; both are refused with that reason), and only an app
  container or a sidecar is resized (a regular init container cannot be);
* **grow** in the container's group (the nodes its blocks name): the growth is taken from
  the group's free memory lowest node first, as the Static policy fills; the blocks grow,
  the nodes do not change; else **grow by extending the group** to the narrowest superset
  of unused nodes the topology manager policy admits
  (:func:`~numamem.memorymanager.resize.extension.find_extension`): every block of the
  group (all its containers') then names the new nodes, and every node of it has the
  group's assignment count and the new cells, exactly what the kubelet's ``validateState``
  replays from the blocks;
* **shrink**: the block shrinks, its memory returns to the group's nodes from the last
  node the policy filled (the highest with memory reserved) down; the group never shrinks.
  numamem does not check the container's usage against the new size (the runtime and the
  kubelet do);
* a refusal is the kubelet's resize vocabulary: **Infeasible** when the resize would not
  fit even if every other pod left (decided by the same rules on the state with only this
  pod), else **Deferred** (it fits once memory is freed); nothing is changed;
* a resize to the current size changes nothing (no write).

:func:`decide` is pure (the state is read, never changed);
:func:`~numamem.memorymanager.resize.apply.apply` makes the change on a transaction's fork.
A pod allocated as a whole by its pod-level resources (KEP-5526) is resized by the same
rules applied to its budget (:mod:`.pod`); in the container scope, a pod-level
pod's equivalent-Guaranteed containers are resized as any container.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from numamem.errors import (
    ResizeDeferredError,
    ResizeError,
    ResizeInfeasibleError,
    SearchBudgetError,
    quote,
)
from numamem.memorymanager.policy.interface import Policy
from numamem.memorymanager.requests.resources import container_requested_resources
from numamem.memorymanager.resize.extension import Extension, find_extension, memory_free
from numamem.memorymanager.state.model import MemoryState
from numamem.memtypes import (
    MEMORY,
    Block,
    ContainerRef,
    MemoryTable,
    NUMANodeState,
)
from numamem.pod import GUARANTEED, Container, Pod, not_guaranteed_because, pod_qos
from numamem.quantity import format_bytes, format_bytes_exact
from numamem.topologymanager.policy import TopologyPolicy
from numamem.work import FIX, Work

UNCHANGED = "unchanged"
NOT_PINNED = "not-pinned"
GROWN = "grown-in-group"
EXTENDED = "grown-by-extension"
SHRUNK = "shrunk"
REPARTITIONED = "repartitioned"
"""A pod allocated as a whole: its budget stays, the shares of its containers inside it change."""
ACTIONS = (UNCHANGED, NOT_PINNED, GROWN, EXTENDED, SHRUNK, REPARTITIONED)
CHANGES = (GROWN, EXTENDED, SHRUNK, REPARTITIONED)


@dataclass(frozen=True)
class PodBudget:
    """The budget of a pod allocated as a whole (KEP-5526) before and after a resize, and the
    blocks of every container of it (with an entry) afterwards: :func:`apply` writes them all."""

    old_size: int
    new_size: int
    blocks: tuple[Block, ...]
    """The pod-level blocks afterwards."""
    containers: tuple[tuple[str, tuple[Block, ...]], ...] = ()
    """Every container with an entry and its blocks afterwards (spec order)."""
    exclusive: tuple[str, ...] = ()
    """The containers with memory of their own (numamem's record)."""


@dataclass(frozen=True)
class Resize:
    """A resize decided on one state: what it does, or why it is refused."""

    pod_uid: str
    container: str
    action: str
    """One of :data:`ACTIONS` (meaningless when ``refusal`` is set)."""
    old_size: int = 0
    new_size: int = 0
    old_nodes: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    """The container's nodes afterwards (its ``cpuset.mems``)."""
    blocks: tuple[Block, ...] = ()
    """The container's blocks afterwards."""
    moved: tuple[ContainerRef, ...] = ()
    """The containers whose nodes change (every container of an extended group)."""
    extension: Extension | None = None
    """The superset search, when the group did not hold the growth."""
    refusal: ResizeError | None = None
    pod_level: PodBudget | None = None
    """Set for a pod allocated as a whole: its budget (``container`` is then the container the
    answer is about, "" for the pod itself, and ``blocks`` its blocks)."""

    @property
    def changes(self) -> bool:
        return self.refusal is None and self.action in CHANGES


def decide(
    state: MemoryState,
    policy: Policy,
    topology: TopologyPolicy | None,
    pod: Pod,
    container: Container,
    work: Work,
    hint_nodes: tuple[int, ...] | None = None,
) -> Resize:
    """What resizing ``container`` (of ``pod``, with its new resources) does on ``state`` (read
    only). ``hint_nodes``: the nodes allocations may use (None: every node of the state). Not
    for a pod allocated as a whole: :func:`.pod.decide` (which calls this one for
    every other pod) resizes its budget."""
    uid, container_name = pod.uid, container.name
    blocks = state.get_memory_blocks(uid, container_name)
    if not blocks:
        return Resize(uid, container_name, NOT_PINNED)
    old = {b.type: b.size for b in blocks}
    memory = next((b for b in blocks if b.type == MEMORY), None)
    nodes = tuple(sorted(memory.numa_affinity or ())) if memory else ()
    head = f"pod {quote(uid)}, container {quote(container_name)}"

    def refuse(verdict: type[ResizeError], why: str) -> Resize:
        size = old.get(MEMORY, 0)
        error = verdict(f"{verdict.verdict}: {head}: {why}")
        return Resize(
            uid, container_name, UNCHANGED, size, size, nodes, nodes, tuple(blocks), refusal=error
        )

    why = forbidden(pod, container)
    if why:
        return refuse(ResizeInfeasibleError, why)
    requested = container_requested_resources(
        container, pod, policy.gates.pod_level_resource_managers
    )
    why = lost_own_memory(requested) or changed_hugepages("requests", requested, old)
    if why:
        return refuse(ResizeInfeasibleError, why)
    if memory is None or MEMORY not in requested:
        return refuse(
            ResizeInfeasibleError,
            "the container has no pinned memory block to resize (it was not allocated by the "
            "Static policy, or asks for no memory of its own); fix: none needed here, the "
            "kubelet resizes a container without pinned memory itself",
        )
    old_size, new_size = memory.size, requested[MEMORY]
    if new_size == old_size:
        return Resize(
            uid, container_name, UNCHANGED, old_size, new_size, nodes, nodes, tuple(blocks)
        )
    grown = tuple(b.with_size(new_size) if b.type == MEMORY else b for b in blocks)
    if new_size < old_size:
        return Resize(uid, container_name, SHRUNK, old_size, new_size, nodes, nodes, grown)
    growth = Growth(uid, nodes, old_size, new_size, requested)
    plan, why = grow(state, topology, growth, work, hint_nodes)
    if why:
        refused = refused_alone(state, policy, topology, growth, work, hint_nodes, why)
        return Resize(
            uid, container_name, UNCHANGED, old_size, old_size, nodes, nodes, tuple(blocks),
            extension=plan, refusal=verdict_error(refused, head, "memory", old_size, new_size),
        )  # fmt: skip
    if plan is None:
        return Resize(uid, container_name, GROWN, old_size, new_size, nodes, nodes, grown)
    wider = tuple(plan.nodes or ())
    moved = members(state, nodes)
    extended = tuple(Block(wider, b.type, b.size) for b in grown)
    return Resize(
        uid, container_name, EXTENDED, old_size, new_size, nodes, wider, extended, moved, plan
    )


RESIZE_FIX = (
    "To resize it, make the search smaller: grow in smaller steps (each extension then "
    "looks at fewer nodes), prefer-closest-numa-nodes=false in "
    "--topology-manager-policy-options, or a larger SEARCH_BUDGET in numamem/work.py"
)
"""What a resize refused for the search budget tells the operator (the admission's
:data:`numamem.work.FIX` speaks of other providers' hints, which a resize has none of)."""


def budget_refusal(err: SearchBudgetError) -> SearchBudgetError:
    """``err`` with the advice for a resize instead of the admission's."""
    return SearchBudgetError(str(err).replace(FIX, RESIZE_FIX))


def forbidden(pod: Pod, container: Container | None) -> str:
    """Why the API server would not have accepted this resize ("" when it would): a QoS class
    change, or a regular init container resized."""
    qos = pod_qos(pod)
    if qos != GUARANTEED:
        return (
            f"the resized pod's QoS class is {qos}, it was Guaranteed "
            f"({not_guaranteed_because(pod) or 'its cpu and memory'}; the API server forbids a "
            "resize that changes the QoS class); fix: keep every cpu and memory request equal "
            "to its limit"
        )
    if container is not None and pod.is_regular_init_container(container.name):
        return (
            "a regular init container cannot be resized in place (the API server resizes "
            "app containers and sidecars only); fix: resize an app container or a sidecar "
            "(restartPolicy: Always) instead"
        )
    return ""


def lost_own_memory(requested: Mapping[str, int]) -> str:
    """Why a container with blocks of its own cannot keep them ("" when it can): with
    pod-level resources, it is no longer equivalent-Guaranteed (it asks for nothing)."""
    if requested:
        return ""
    return (
        "the container holds memory of its own, and its resized resources no longer give it "
        "any (its own cpu and memory requests must equal its limits, or it shares its pod's "
        "memory): numamem does not move a container between memory of its own and a shared "
        "pool in place; fix: keep its cpu and memory requests equal to its limits, or "
        "recreate the pod"
    )


def changed_hugepages(field: str, requested: Mapping[str, int], old: Mapping[str, int]) -> str:
    """Why a hugepage size changed ("" when none did): the API server forbids it."""
    for name in sorted((set(requested) | set(old)) - {MEMORY}):
        if requested.get(name, 0) != old.get(name, 0):
            return (
                f'{field}["{name}"]: {format_bytes_exact(requested.get(name, 0))}, pinned '
                f"{format_bytes_exact(old.get(name, 0))}: the API server does not allow "
                "hugepage resize; fix: keep the hugepage requests as they are"
            )
    return ""


@dataclass(frozen=True)
class Growth:
    """One allocation (a container's blocks, or a pod's budget) growing in its group."""

    pod_uid: str
    nodes: tuple[int, ...]
    old_size: int
    new_size: int
    requested: Mapping[str, int]
    """The new request (for ``restricted``'s preferred hints)."""


def grow(
    state: MemoryState,
    topology: TopologyPolicy | None,
    growth: Growth,
    work: Work,
    hint_nodes: tuple[int, ...] | None,
) -> tuple[Extension | None, str]:
    """(None, ""): the group holds the growth; (an Extension, ""): the superset it grows to;
    (the Extension, why): neither fits, and why."""
    nodes, need, requested = growth.nodes, growth.new_size - growth.old_size, growth.requested
    machine = state.machine_view()
    free = sum(memory_free(machine, n) for n in nodes)
    if free >= need:
        return None, ""
    types = {b.type for _, _, bs in state.iter_containers() for b in bs if on_group(b, nodes)}
    # A pod-level budget can hold a type no container's block names (a pool nobody shares).
    for blocks in state.get_pod_memory_assignments().values():
        types.update(b.type for b in blocks if on_group(b, nodes))
    everyone = tuple(sorted(n for n, s in machine.items() if s is not None))
    extension = find_extension(
        machine, nodes, need, types, hint_nodes or everyone, topology, requested, work
    )
    if extension.nodes is None:
        return extension, (
            f"nodes {list(nodes)} have {format_bytes(free)} free, {format_bytes(need)} more "
            f"is needed, and {extension.failure}"
        )
    return extension, ""


@dataclass(frozen=True)
class _Verdict:
    """Why a resize does not fit now, and whether it would with every other pod gone."""

    why: str
    alone: str
    """Why it would not fit alone ("" when it would: Deferred)."""
    most: int | None
    """The most the container could have alone, where the policy's rule says (Infeasible)."""


def verdict_error(
    verdict: _Verdict, head: str, what: str, old_size: int, new_size: int
) -> ResizeError:
    """The refusal of a growth of ``what`` (e.g. "memory") that does not fit."""
    size = f"{what} {format_bytes(old_size)} -> {format_bytes_exact(new_size)}"
    if verdict.alone:
        most = (
            ""
            if verdict.most is None
            else f"resize to at most {format_bytes_exact(verdict.most)}, or "
        )
        return ResizeInfeasibleError(
            f"Infeasible: {head}: {size}: it does not fit on this machine even if every other "
            f"pod left: {verdict.alone}; fix: {most}recreate the pod with the new size (a new "
            "admission may choose other nodes)"
        )
    return ResizeDeferredError(
        f"Deferred: {head}: {size}: {verdict.why}; it fits once other pods free memory on these "
        "nodes: retry after they leave"
    )


def refused_alone(
    state: MemoryState,
    policy: Policy,
    topology: TopologyPolicy | None,
    growth: Growth,
    work: Work,
    hint_nodes: tuple[int, ...] | None,
    why: str,
) -> _Verdict:
    """Deferred or Infeasible: the same rules on the state with every other pod gone."""
    alone = state.fork()
    for uid, name, _ in list(state.iter_containers()):
        if uid != growth.pod_uid:
            policy.remove_container(alone, uid, name)
    extension, alone_why = grow(alone, topology, growth, work, hint_nodes)
    most = None
    if alone_why and extension is not None and extension.capacity is not None:
        room = sum(memory_free(alone.machine_view(), n) for n in growth.nodes)
        most = growth.old_size + room + extension.capacity
    return _Verdict(why, alone_why, most)


def members(state: MemoryState, nodes: tuple[int, ...]) -> tuple[ContainerRef, ...]:
    """Every container with a block on the group ``nodes`` (sorted)."""
    return tuple(
        sorted(
            (uid, name)
            for uid, name, blocks in state.iter_containers()
            if any(on_group(b, nodes) for b in blocks)
        )
    )


def on_group(block: Block, nodes: Collection[int]) -> bool:
    """Whether ``block`` names exactly the nodes ``nodes`` (a block of that group)."""
    return set(block.numa_affinity or ()) == set(nodes)


def memory_table(machine: Mapping[int, NUMANodeState | None], n: int) -> MemoryTable | None:
    """Node ``n``'s ``memory`` table, if it has one."""
    node = machine.get(n)
    return None if node is None else (node.memory_map or {}).get(MEMORY)
