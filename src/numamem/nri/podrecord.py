"""The plugin's record of one Guaranteed pod: its containers in the order the runtime created
them, what kind each can be told to be, and what numamem holds for it. Pure.

The CRI never says whether a container is an init container, a sidecar (a restartable init
container) or an app container. What the plugin sees is the kubelet's order: init containers
one at a time, each run to completion (exit 0) before the next container of the pod is
created, sidecars started and left running, then every app container. So:

* when a container with a **new name** is created, every earlier container that has stopped
  is a regular init container (:attr:`Kind.INIT`), unless the new one is a restart of a name
  the plugin never saw (its ``restartCount`` annotation is above 0: e.g. after a plugin
  restart), which tells nothing of the order;
* a name freed as a finished init container that the kubelet re-creates **in the same
  sandbox** never was one (a regular init container that succeeded is re-run only in a new
  sandbox): an app container or sidecar that exited before the pod's next container was
  created. It becomes long-running again and is admitted again (the memory it had may have
  gone to others meanwhile: the kubelet would have kept it);
* a running container created before a regular init container is a sidecar
  (:attr:`Kind.SIDECAR`);
* every other one (running, or stopped but followed by no new name yet) is a sidecar or an
  app container, which the container scope treats alike (:attr:`Kind.LONG_RUNNING`).

:meth:`PodRecord.admission_pod` is the pod the plugin admits when a container is created:
the earlier containers numamem still holds, regular init containers first, then the new one
as an app container (its own kind does not change its allocation: it reuses the memory of
every earlier regular init container, as the kubelet's Static policy does for any kind).
Containers freed as finished init containers (:attr:`Pin.RELEASED`) are never listed
again (but re-created in their sandbox, above), so an incremental admission never
re-allocates them: the kubelet never re-admits a pod, and its re-created init containers (a
new sandbox) run with no pinning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from numamem.nri.kube import Limits as ContainerLimits
from numamem.nri.kube import PodIdentity
from numamem.v1 import memorymanager_pb2 as mm


class Kind(StrEnum):
    INIT = "init"
    SIDECAR = "sidecar"
    LONG_RUNNING = "long-running"


class Pin(StrEnum):
    UNKNOWN = "unknown"
    """Not decided yet (created, or seen running in a Synchronize and not held by numamem)."""
    PINNED = "pinned"
    """numamem holds its memory (admitted, or found held after a restart)."""
    RELEASED = "released"
    """Freed as a finished regular init container (the kubelet's AddContainer of a later
    one): never admitted again, unless re-created in the same sandbox."""
    LEFT_ALONE = "left-alone"
    """Not pinned on purpose: its creation went on unpinned (``--on-reject=unpinned``), or
    it is a re-creation of a released container. :attr:`Entry.note` says why."""


@dataclass
class Entry:
    """One container name of the pod (its instances share the name: a restart re-creates it)."""

    name: str
    container_id: str
    """The newest instance's runtime id."""
    limits: ContainerLimits
    stopped: bool = False
    init: bool = False
    """Stopped when a container with a new name was created: a regular init container."""
    pin: Pin = Pin.UNKNOWN
    note: str = ""
    nodes: tuple[int, ...] = ()
    """The NUMA nodes of its blocks while :attr:`pin` is PINNED (its ``cpuset.mems``)."""
    older_ids: list[str] = field(default_factory=list)
    id_recorded: bool = False
    """The daemon was told the newest instance's id (AddContainer)."""
    sandbox_id: str = ""
    """The sandbox of the newest instance."""


@dataclass
class PodRecord:
    """See the module docstring. Not thread-safe: the plugin serializes its calls."""

    identity: PodIdentity
    entries: dict[str, Entry] = field(default_factory=dict)
    """By name, in the order their names were first created."""

    @property
    def uid(self) -> str:
        return self.identity.uid

    # --- what the runtime did -----------------------------------------------------------

    def created(
        self,
        name: str,
        container_id: str,
        limits: ContainerLimits,
        *,
        sandbox_id: str = "",
        restart_count: int | None = None,
    ) -> Entry:
        """A container was created: a new name (every stopped earlier container becomes a
        regular init container, unless this is a restart of a name the plugin never saw:
        ``restart_count`` > 0, the kubelet's ``io.kubernetes.container.restartCount``) or a
        re-creation of a known one (its newest instance now). A name freed as a finished
        init container and re-created in the same sandbox never was one (the kubelet never
        re-creates a regular init container that succeeded, but in a new sandbox): it is
        long-running again, to be admitted again."""
        entry = self.entries.get(name)
        if entry is None:
            if not restart_count:
                for earlier in self.entries.values():
                    if earlier.stopped:
                        earlier.init = True
            entry = self.entries[name] = Entry(name, container_id, limits, sandbox_id=sandbox_id)
            return entry
        if (
            entry.pin is Pin.RELEASED
            and restart_count != 0
            and sandbox_id
            and entry.sandbox_id == sandbox_id
        ):
            entry.init, entry.pin, entry.nodes = False, Pin.UNKNOWN, ()
            entry.note = "re-created in its sandbox: not a finished init container; admitted again"
        if entry.container_id != container_id:
            if entry.container_id:
                entry.older_ids.append(entry.container_id)
            entry.container_id = container_id
        entry.stopped = False
        entry.limits = limits
        entry.id_recorded = False
        entry.sandbox_id = sandbox_id or entry.sandbox_id
        return entry

    def stopped(self, container_id: str) -> Entry | None:
        """The newest instance of a name stopped (an older one's stop changes nothing)."""
        entry = self.by_id(container_id)
        if entry is not None and entry.container_id == container_id:
            entry.stopped = True
        return entry

    def removed(self, container_id: str, name: str = "") -> tuple[Entry | None, bool]:
        """A container was removed: its entry and whether it was the name's newest instance
        (only then may numamem release the name's memory: an older instance's removal must
        not take it from the running one). The newest instance's removal drops the name. A
        name kept with no known instance (an exited container a Synchronize did not list:
        id "") is that instance, found by ``name``."""
        entry = self.by_id(container_id)
        if entry is None:
            kept = self.entries.get(name) if name else None
            if kept is None or kept.container_id:
                return None, False
            entry = kept
        elif entry.container_id != container_id:
            entry.older_ids.remove(container_id)
            return entry, False
        del self.entries[entry.name]
        return entry, True

    def new_sandbox(self, identity: PodIdentity) -> None:
        """The kubelet made a new sandbox for the pod: it re-creates the containers, which are
        not regular init containers for having been stopped with the old one."""
        self.identity = identity
        for entry in self.entries.values():
            entry.stopped = False

    def by_id(self, container_id: str) -> Entry | None:
        for entry in self.entries.values():
            if entry.container_id == container_id or container_id in entry.older_ids:
                return entry
        return None

    # --- what the plugin tells the daemon ---------------------------------------------------

    def kinds(self) -> dict[str, Kind]:
        """Each name's kind as far as it can be told (module docstring)."""
        names = list(self.entries)
        last_init = max((i for i, n in enumerate(names) if self.entries[n].init), default=-1)
        out = {}
        for i, name in enumerate(names):
            entry = self.entries[name]
            if entry.init:
                out[name] = Kind.INIT
            elif i < last_init and not entry.stopped:
                out[name] = Kind.SIDECAR
            else:
                out[name] = Kind.LONG_RUNNING
        return out

    def admission_pod(self, *names: str) -> mm.Pod:
        """The pod to admit (and to record ids with) for ``names``: the containers numamem
        holds plus ``names``, init containers (regular and sidecars) first, the others in
        creation order, ``names`` among them as app containers unless known to be init
        containers or sidecars."""
        kinds = self.kinds()
        inits: list[mm.Container] = []
        apps: list[mm.Container] = []
        for name, entry in self.entries.items():
            if entry.pin is not Pin.PINNED and name not in names:
                continue
            kind = kinds[name]
            msg = container_message(entry, kind)
            (inits if kind in (Kind.INIT, Kind.SIDECAR) else apps).append(msg)
        if not apps and inits:  # a pod needs an app container: the newest listed is the one
            apps.append(inits.pop())
            apps[0].restart_policy = ""
        return mm.Pod(
            uid=self.identity.uid,
            namespace=self.identity.namespace,
            name=self.identity.name,
            init_containers=inits,
            containers=apps,
        )

    def freed_by(self, pod: mm.Pod, name: str) -> list[str]:
        """The containers the daemon's AddContainer of ``name`` with ``pod`` frees: the
        regular init containers listed before it (all of them for an app container)."""
        out = []
        for init in pod.init_containers:
            if init.name == name:
                break
            if init.restart_policy != "Always":
                out.append(init.name)
        return out

    def held(self) -> list[Entry]:
        """The entries numamem holds memory for."""
        return [e for e in self.entries.values() if e.pin is Pin.PINNED]


def container_message(entry: Entry, kind: Kind) -> mm.Container:
    """The container as the daemon's API takes it: requests equal to its limits."""
    resources = entry.limits.resources()
    return mm.Container(
        name=entry.name,
        requests=resources,
        limits=resources,
        restart_policy="Always" if kind is Kind.SIDECAR else "",
    )
