"""CreateContainer: the kubelet's container-scope admission of a Guaranteed container, at the
moment the runtime creates it, and its ``cpuset.mems``.

For a container of a Guaranteed pod (the cgroup parent says so, and it has a CPU and a
memory limit) the plugin admits the pod as known so far (:meth:`PodRecord.admission_pod
<numamem.nri.podrecord.PodRecord.admission_pod>`: the containers numamem holds and this
one), which is idempotent for the containers already allocated, with the container's
runtime id in the same request: the daemon records it as ``AddContainer`` (the kubelet's
PreStartContainer) would, freeing the memory of the pod's earlier regular init containers,
in the admission's one durable write, so the runtime waits for one write, and a crash
leaves either both or neither. It returns the container's NUMA nodes as ``cpuset.mems``,
written as the kubelet writes them ("0,1"). ``cpuset.cpus`` is never touched (the
kubelet's CPU manager owns it). The CPUs the container
names are the CPU manager's hint at admission, as the kubelet's topology manager merges it
(:mod:`.cpuhints`).

A container numamem does not admit, or cannot ask the daemon about, fails its creation with
a message naming the pod, the container, what it asks and how to see why (``numamem
explain``); with ``--on-reject=unpinned`` it starts unpinned instead, logged and counted.
Everything else (Burstable and BestEffort pods, what the runtime sent that cannot be used)
is left alone.
"""

from __future__ import annotations

import time

from numamem.errors import (
    DaemonRefusedError,
    DeadlineExceededError,
    NriStatusError,
    UnavailableError,
    UnusableInputError,
    quote,
)
from numamem.logging import get_logger
from numamem.nri import cpuhints, kube, status
from numamem.nri import pluginstate as counters
from numamem.nri.daemonlink import Budget
from numamem.nri.pluginstate import PluginState
from numamem.nri.podrecord import Entry, Pin, PodRecord
from numamem.nri.reconcile import block_nodes
from numamem.nriapi import api_pb2 as api
from numamem.v1 import memorymanager_pb2 as mm

_log = get_logger("nri")

POD_SCOPE = "pod"


def create(
    state: PluginState, sandbox: api.PodSandbox, container: api.Container, budget: Budget
) -> api.CreateContainerResponse:
    """The adjustment of a created container (see the module docstring). The caller holds
    ``state.lock``. Raises ``NriStatusError`` to fail the creation."""
    began = time.perf_counter()
    state.view.add_container(container, sandbox)
    fields = {
        "container": quote(container.name, style="bare"),
        "container_id": quote(container.id, style="bare"),
    }
    try:
        identity = kube.pod_identity(sandbox)
        qos = kube.qos_from_cgroup_parent(sandbox.linux.cgroup_parent, identity.uid)
        fields["pod"] = identity.describe()
        if qos != kube.GUARANTEED:
            _log.debug("NRI container left alone: not Guaranteed", qos=qos, **fields)
            return api.CreateContainerResponse()
        limits = kube.container_limits(container)
        kube.check_guaranteed(limits, container.name)
    except UnusableInputError as err:
        state.left_alone(err, **fields)
        return api.CreateContainerResponse()
    record = state.record_for(identity)
    entry = record.created(
        container.name,
        container.id,
        limits,
        sandbox_id=sandbox.id,
        restart_count=kube.restart_count(container),
    )
    if entry.pin is Pin.RELEASED:
        entry.note = (
            "re-created after numamem freed it as a finished init container: it runs unpinned, "
            "as under the kubelet"
        )
        _log.info("NRI container left alone", reason=entry.note, **fields)
        return api.CreateContainerResponse()
    response = _admit(state, record, entry, container, budget)
    _log.debug(
        "NRI CreateContainer handled",
        seconds=round(time.perf_counter() - began, 6),
        mems=response.adjust.linux.resources.cpu.mems,
        **fields,
    )
    return response


def _admit(
    state: PluginState, record: PodRecord, entry: Entry, container: api.Container, budget: Budget
) -> api.CreateContainerResponse:
    request_id = f"nri-create-{container.id[:12]}"
    try:
        settings = state.daemon.current_settings(budget)
        if settings.topology_manager_scope == POD_SCOPE:
            return reject(state, record, entry, container.id, pod_scope_refusal(record, entry))
        pod = record.admission_pod(entry.name)
        providers = cpu_provider(entry.name, container.linux.resources.cpu.cpus, state, budget)
        # The runtime id goes with the admission: one durable write (AddContainer's in it).
        request = mm.AdmitRequest(
            pod=pod, container_ids={entry.name: container.id}, other_providers=providers
        )
        reply: mm.AdmitResponse = state.daemon.call("Admit", request, budget, request_id)
    except (UnavailableError, DeadlineExceededError) as err:
        text = unreachable_message(entry.name, record.identity.describe(), err)
        return reject(state, record, entry, container.id, text, retry=True)
    except DaemonRefusedError as err:
        text = f"the numamem daemon refused Admit: {err.code}: {err}"
        return reject(state, record, entry, container.id, text)
    if not reply.admitted:
        text = rejection_message(record, entry, reply, settings.topology_manager_policy)
        return reject(state, record, entry, container.id, text)
    if reply.container_ids_recorded:
        ids_recorded(record, pod, entry)
    else:  # a daemon older than Admit's container_ids: AddContainer records the id
        add_container(state, record, pod, entry, budget)
    admission = next((c for c in reply.containers if c.container_name == entry.name), None)
    nodes = block_nodes(admission.blocks) if admission is not None else ()
    if not nodes:
        entry.pin = Pin.LEFT_ALONE
        entry.note = admission.not_pinned_message if admission is not None else "no blocks"
        _log.info(
            "NRI container not pinned by numamem",
            reason=admission.not_pinned_reason if admission is not None else "",
            message=quote(entry.note, style="bare", limit=1024),
            pod=record.identity.describe(),
            container=quote(entry.name, style="bare"),
        )
        return api.CreateContainerResponse()
    entry.pin, entry.nodes = Pin.PINNED, nodes
    state.count(counters.ADMITTED)
    mems = kube.mems_string(nodes)
    state.view.set_mems(container.id, mems)
    response = api.CreateContainerResponse()
    response.adjust.linux.resources.cpu.mems = mems
    return response


def cpu_provider(
    name: str, cpus: str, state: PluginState, budget: Budget
) -> list[mm.ProviderHints]:
    """The kubelet CPU manager's hint for the container's CPUs (:mod:`numamem.nri.cpuhints`);
    none when the CPUs are not set. Raises the daemon link's errors."""
    if not cpus:
        return []
    return cpuhints.cpu_provider(name, cpus, state.daemon.cpu_nodes(budget))


def add_container(
    state: PluginState, record: PodRecord, pod: mm.Pod, entry: Entry, budget: Budget
) -> None:
    """Record the container's runtime id with the daemon; mark the regular init containers it
    frees. An unreachable daemon is not an error here (the memory is held; the next
    reconciliation records the id)."""
    request = mm.AddContainerRequest(
        pod=pod, container_name=entry.name, container_id=entry.container_id
    )
    try:
        state.daemon.call("AddContainer", request, budget, f"nri-add-{entry.container_id[:12]}")
    except (UnavailableError, DeadlineExceededError, DaemonRefusedError) as err:
        _log.warning(
            "NRI container pinned, but its runtime id was not recorded; the next "
            "reconciliation records it",
            pod=record.identity.describe(),
            container=quote(entry.name, style="bare"),
            error=str(err),
        )
        state.dirty.set()
        return
    ids_recorded(record, pod, entry)


def ids_recorded(record: PodRecord, pod: mm.Pod, entry: Entry) -> None:
    """The daemon recorded ``entry``'s id with ``pod`` (AddContainer, or Admit's
    ``container_ids``): mark it, and the regular init containers that freed."""
    entry.id_recorded = True
    for name in record.freed_by(pod, entry.name):
        freed = record.entries.get(name)
        if freed is not None and freed.pin is Pin.PINNED:
            freed.pin, freed.nodes = Pin.RELEASED, ()


def created_unpinned(
    state: PluginState, sandbox: api.PodSandbox, container: api.Container, message: str
) -> None:
    """A creation that went on unpinned without the plugin's lock (``--on-reject=unpinned``):
    noted in the view and the records as not decided, for a reconciliation to adopt it;
    counted. The caller holds ``state.lock``."""
    state.view.add_container(container, sandbox)
    state.count(counters.UNPINNED)
    try:
        identity = kube.pod_identity(sandbox)
        if (
            kube.qos_from_cgroup_parent(sandbox.linux.cgroup_parent, identity.uid)
            != kube.GUARANTEED
        ):
            return
        limits = kube.container_limits(container)
    except UnusableInputError:
        return
    entry = state.record_for(identity).created(
        container.name,
        container.id,
        limits,
        sandbox_id=sandbox.id,
        restart_count=kube.restart_count(container),
    )
    entry.pin, entry.note = Pin.UNKNOWN, message


def reject(
    state: PluginState,
    record: PodRecord,
    entry: Entry,
    container_id: str,
    message: str,
    *,
    retry: bool = False,
) -> api.CreateContainerResponse:
    """Fail the creation with ``message`` or, with ``--on-reject=unpinned``, let the container
    start unpinned (logged, counted). ``retry``: the daemon was not reached (a later
    reconciliation tries to admit the unpinned container)."""
    if state.options.on_reject == "unpinned":
        entry.pin = Pin.UNKNOWN if retry else Pin.LEFT_ALONE
        entry.note = message
        total = state.count(counters.UNPINNED)
        _log.warning(
            "NRI container starts unpinned (--on-reject=unpinned)",
            reason=message,
            unpinned_total=total,
        )
        return api.CreateContainerResponse()
    total = state.count(counters.FAILED)
    _log.warning("NRI container creation failed", reason=message, failed_total=total)
    forget(state, record, entry, container_id)
    raise NriStatusError(status.UNKNOWN, message)


def forget(state: PluginState, record: PodRecord, entry: Entry, container_id: str) -> None:
    """A creation that failed: the container never existed."""
    state.view.remove_container(container_id)
    if entry.container_id == container_id:
        if entry.older_ids:
            entry.container_id = entry.older_ids.pop()
            entry.stopped = True
        else:
            record.entries.pop(entry.name, None)


def rejection_message(record: PodRecord, entry: Entry, reply: mm.AdmitResponse, policy: str) -> str:
    """Why the creation fails, for the pod's events: pod, container, what it asks, the
    daemon's reason, and how to see why."""
    who = record.identity
    return (
        f"numamem did not admit container {quote(entry.name)} of pod {who.describe()}: "
        f"{reply.reason}: {reply.message} (it asks {entry.limits.describe()}; topology manager "
        f"policy {policy or 'none'}); see why with: kubectl get pod -n "
        f"{quote(who.namespace, style='bare')} {quote(who.name, style='bare')} -o yaml | "
        "numamem explain -f -"
    )


def unreachable_message(container: str, pod: str, err: Exception) -> str:
    """Why the creation of ``container`` of ``pod`` (described) fails when the daemon, or the
    plugin's state, was not had in time."""
    return f"numamem could not admit container {quote(container)} of pod {pod}: {err}"


def pod_scope_refusal(record: PodRecord, entry: Entry) -> str:
    return (
        f"numamem cannot admit container {quote(entry.name)} of pod "
        f"{record.identity.describe()} as the kubelet would: the daemon admits in the pod "
        "scope (--topology-manager-scope pod), whose hints sum every container of the pod, "
        "and the runtime tells a pod's containers one at a time, as it creates them; run the "
        "daemon with --topology-manager-scope container for numamem nri"
    )
