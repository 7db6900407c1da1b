"""Reconciling the daemon with the runtime, both ways: the plans, without the RPCs. Pure.

After a Synchronize (the plugin's first start, a reconnect, a runtime restart) and after the
daemon was unreachable (a daemon restart, or events it missed), the plugin

1. rebuilds its records of the Guaranteed pods (:func:`rebuild`) from the runtime's view and
   the daemon's state: a container numamem holds is pinned, one it does not hold is a
   candidate for adoption (created before numamem ran, or while the daemon was away), and a
   name numamem holds of a pod the runtime still runs is kept even when the runtime lists no
   container of that name (it exited: a crash-looping container, a finished init container
   whose pod's next container is not created yet);
2. declares the runtime's pods to the daemon (``SyncActivePods`` with :func:`active_pods`):
   the daemon releases every container the runtime no longer has, as the kubelet's
   ``removeStaleState`` does for pods that are gone;
3. admits the candidates pod by pod (the plugin does it: :func:`adoption_candidates`) and
   records their runtime ids;
4. updates the ``cpuset.mems`` of every running pinned container whose value differs from
   numamem's decision (:func:`mems_updates`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from numamem.errors import UnusableInputError
from numamem.nri import kube
from numamem.nri.podrecord import Entry, Pin, PodRecord
from numamem.nri.view import RuntimeView
from numamem.nriapi import api_pb2 as api
from numamem.v1 import memorymanager_pb2 as mm

CHECK_EVERY = 512
"""Pods :func:`rebuild` handles between two calls of its ``check``."""


@dataclass(frozen=True)
class Problem:
    """Something of the runtime's the plugin could not use: kind (stable), message, pod."""

    kind: str
    message: str
    pod_uid: str = ""
    container: str = ""


def active_pods(view: RuntimeView, records: dict[str, PodRecord]) -> list[mm.Pod]:
    """The pods to declare with SyncActivePods: every pod uid of the view with the names of
    its containers in all its sandboxes and the names its record keeps (the exited
    containers numamem holds, which containerd's Synchronize does not list); a pod without
    any holds nothing and is left out (the API wants a container). Linear."""
    out = []
    for uid, pod_view in sorted(view.pods().items()):
        names = set(pod_view.names)
        record = records.get(uid)
        if record is not None:
            names.update(record.entries)
        if names:
            sandbox = pod_view.sandbox
            out.append(
                mm.Pod(
                    uid=uid,
                    namespace=sandbox.namespace,
                    name=sandbox.name,
                    containers=[mm.Container(name=n) for n in sorted(names)],
                )
            )
    return out


def rebuild(
    view: RuntimeView,
    state: mm.GetStateResponse,
    old: dict[str, PodRecord],
    *,
    synchronized: bool = False,
    check: Callable[[], object] | None = None,
) -> tuple[dict[str, PodRecord], list[Problem]]:
    """The records of the view's Guaranteed pods, given the daemon's ``state``. Linear.

    An entry keeps what the old record knew of the same container instance (a regular init
    container, released, left alone); otherwise it is pinned when ``state`` holds its name
    and a candidate for adoption when not. A name ``state`` holds that the view does not list
    (an exited container: containerd's Synchronize lists none) is kept as a stopped, pinned
    entry, as the kubelet keeps a container's memory until its pod is gone: after a
    Synchronize (``synchronized``) every such name of a pod whose sandbox is listed, later
    only those the old record kept (a name the runtime removed since is released).
    ``check`` is called every :data:`CHECK_EVERY` pods (a deadline's: it raises to stop)."""
    records: dict[str, PodRecord] = {}
    problems: list[Problem] = []
    for done, (uid, pod_view) in enumerate(view.pods().items()):
        if check is not None and done % CHECK_EVERY == CHECK_EVERY - 1:
            check()
        sandbox = pod_view.sandbox
        try:
            identity = kube.pod_identity(sandbox)
            qos = kube.qos_from_cgroup_parent(sandbox.linux.cgroup_parent, identity.uid)
        except UnusableInputError as err:
            problems.append(Problem(err.problem, str(err), uid))
            continue
        if qos != kube.GUARANTEED:
            continue
        held = state.entries[uid].containers if uid in state.entries else {}
        previous = old.get(uid)
        record = PodRecord(identity)
        listed = {c.name for c in pod_view.containers}
        for name, blocks in held.items():  # exited: before the listed ones (init containers)
            if name in listed:
                continue
            before = previous.entries.get(name) if previous is not None else None
            if before is None and not synchronized:
                continue
            entry = kept_entry(name, blocks.blocks, before, sandbox.id)
            record.entries[name] = entry
        for container in pod_view.containers:
            try:
                limits = kube.container_limits(container)
            except UnusableInputError as err:
                problems.append(Problem(err.problem, str(err), uid, container.name))
                continue
            entry = Entry(container.name, container.id, limits, sandbox_id=container.pod_sandbox_id)
            entry.stopped = view.is_stopped(container.id)
            before = previous.entries.get(container.name) if previous is not None else None
            if before is not None and before.container_id == container.id:
                entry.init = before.init
                entry.older_ids = list(before.older_ids)
                entry.id_recorded = before.id_recorded
            if container.name in held:
                entry.pin = Pin.PINNED
                entry.nodes = block_nodes(held[container.name].blocks)
            elif (
                before is not None
                and before.container_id == container.id
                and before.pin in (Pin.RELEASED, Pin.LEFT_ALONE)
            ):
                entry.pin, entry.note = before.pin, before.note
            record.entries[container.name] = entry
        if record.entries:
            records[uid] = record
    return records, problems


def kept_entry(
    name: str, blocks: Sequence[mm.MemoryBlock], before: Entry | None, sandbox_id: str
) -> Entry:
    """The stopped entry of a name numamem holds that the runtime does not list: what the
    plugin knew of it, else its limits from its blocks (its instance's id is unknown: ""),
    with a CPU request of 1m standing in (the daemon uses CPU only for the QoS class; the
    restart's CreateContainer brings the real one)."""
    if before is not None:
        entry = Entry(name, before.container_id, before.limits, sandbox_id=before.sandbox_id)
        entry.init, entry.note = before.init, before.note
        entry.older_ids, entry.id_recorded = list(before.older_ids), before.id_recorded
    else:
        sizes: dict[str, int] = {}
        for block in blocks:
            sizes[block.type] = sizes.get(block.type, 0) + block.size
        memory = sizes.pop("memory", None)
        limits = kube.Limits(1, memory, tuple(sorted(sizes.items())))
        entry = Entry(name, "", limits, sandbox_id=sandbox_id)
    entry.stopped = True
    entry.pin, entry.nodes = Pin.PINNED, block_nodes(blocks)
    return entry


def adoption_candidates(record: PodRecord) -> list[Entry]:
    """The running containers of ``record`` numamem does not hold and has not decided to
    leave alone, with the limits of a Guaranteed container."""
    return [
        e
        for e in record.entries.values()
        if e.pin is Pin.UNKNOWN and not e.stopped and e.limits.guaranteed_shape
    ]


def mems_updates(view: RuntimeView, records: dict[str, PodRecord]) -> list[api.ContainerUpdate]:
    """Updates for the running pinned containers whose ``cpuset.mems`` (as the runtime last
    said) is not the nodes of their blocks."""
    out = []
    for record in records.values():
        for entry in record.entries.values():
            if entry.pin is not Pin.PINNED or entry.stopped or not entry.nodes:
                continue
            container = view.container(entry.container_id)
            if container is None:
                continue
            if kube.parse_mems(container.linux.resources.cpu.mems) != frozenset(entry.nodes):
                out.append(mems_update(entry.container_id, kube.mems_string(entry.nodes)))
    return out


def block_nodes(blocks: Iterable[mm.MemoryBlock]) -> tuple[int, ...]:
    """The sorted NUMA nodes of some ``MemoryBlock`` messages (``GetMemoryNUMANodes``)."""
    nodes: set[int] = set()
    for block in blocks:
        nodes.update(block.numa_affinity)
    return tuple(sorted(nodes))


def mems_update(container_id: str, mems: str) -> api.ContainerUpdate:
    """An update that sets a container's ``cpuset.mems`` (and nothing else)."""
    update = api.ContainerUpdate(container_id=container_id)
    update.linux.resources.cpu.mems = mems
    return update
