"""The podresources answers built from numamem's committed state, and merged with the kubelet's.

Pure functions of their arguments (the memory manager's committed :class:`StateView` and
pod names, the kubelet's messages); they copy what they return, never change what they are
given. The rules (which containers are listed, pod-level memory, names, the newest pod of
a name last) are those :mod:`numamem.api.podresources` documents for ``List``, ``Get`` and
``GetAllocatableResources``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.state.model import StateView
from numamem.memtypes import Block
from numamem.v1 import podresources_pb2 as pr


def memory_to_proto(blocks: Iterable[Block]) -> list[pr.ContainerMemory]:
    """The kubelet's ``containerMemoryFromBlock``, zero-size blocks left out."""
    return [
        pr.ContainerMemory(
            memory_type=b.type,
            size=b.size,
            topology=pr.TopologyInfo(nodes=[pr.NUMANode(ID=n) for n in b.numa_affinity or ()]),
        )
        for b in blocks
        if b.size > 0
    ]


def own_pods(state: StateView, names: Mapping[str, tuple[str, str]]) -> list[pr.PodResources]:
    """Every pod of ``state`` (the memory manager's committed state), sorted by namespace and
    name; a pod without recorded names is named by its uid.

    Pods are uids, names are labels: two uids that carry one name (a StatefulSet pod
    re-created while the old uid still holds memory) are both listed, the newest
    (recorded last in ``names``) last.
    """
    recorded = {uid: i for i, uid in enumerate(names)}
    pod_entries = state.pod_entries()
    keyed = []
    for uid, containers in state.pods():
        namespace, name = names.get(uid, ("", uid))
        pod_blocks = pod_entries.get(uid)
        if pod_blocks is None:
            listed = [(ctr, memory_to_proto(blocks)) for ctr, blocks in sorted(containers.items())]
            # A container without memory is a regular init container whose memory the app
            # containers reuse (every other container of a pod with state holds its request):
            # the kubelet never lists those.
            listed = [(c, m) for c, m in listed if m]
        else:
            exclusive = state.exclusive_containers(uid)
            listed = [
                (ctr, memory_to_proto(blocks) if ctr in exclusive else [])
                for ctr, blocks in sorted(containers.items())
                if podlevel.isolation_level(blocks, pod_blocks, exclusive, ctr) != podlevel.HOST
            ]
        pod = pr.PodResources(
            name=name,
            namespace=namespace,
            containers=[pr.ContainerResources(name=c, memory=m) for c, m in listed],
            memory=memory_to_proto(pod_blocks or ()),
        )
        keyed.append(((namespace, name, recorded.get(uid, -1), uid), pod))
    keyed.sort(key=lambda item: item[0])
    return [pod for _, pod in keyed]


def newest_by_name(pods: Sequence[pr.PodResources]) -> dict[tuple[str, str], pr.PodResources]:
    """(namespace, name) -> the newest pod of that name in :func:`own_pods` order."""
    return {(p.namespace, p.name): p for p in pods}


def merge_pod(kubelet: pr.PodResources, ours: pr.PodResources) -> pr.PodResources:
    """The kubelet's pod with numamem's memory for every container (numamem manages the pod's
    memory). The kubelet's containers are the pod's: its app containers and restartable init
    containers (sidecars), never a regular init container, so numamem's containers it does
    not list (regular init containers still holding memory) are left out, as it does."""
    merged = pr.PodResources()
    merged.CopyFrom(kubelet)
    memory = {c.name: c.memory for c in ours.containers}
    for container in merged.containers:
        del container.memory[:]
        container.memory.extend(memory.get(container.name, []))
    del merged.memory[:]
    merged.memory.extend(ours.memory)
    return merged


def merge_lists(
    kubelet: Sequence[pr.PodResources], ours: Sequence[pr.PodResources]
) -> list[pr.PodResources]:
    """The kubelet's pods in its order (numamem's memory in those numamem has state for),
    then numamem's pods the kubelet does not list.

    The kubelet knows one pod per name (the live one), so it merges with numamem's newest
    pod of that name. An older uid of the same name that still holds memory in numamem is
    listed just before it: in both modes the newest pod of a name comes last, so a client
    that keys the list by name keeps the newest.
    """
    named: dict[tuple[str, str], list[pr.PodResources]] = {}
    for p in ours:
        named.setdefault((p.namespace, p.name), []).append(p)  # the newest last
    emitted: set[int] = set()
    out = []
    for pod in kubelet:
        group = named.pop((pod.namespace, pod.name), None)
        if group is None:
            out.append(pod)
            continue
        *older, own = group
        out.extend(older)
        out.append(merge_pod(pod, own))
        emitted.update(id(p) for p in group)
    return out + [p for p in ours if id(p) not in emitted]
