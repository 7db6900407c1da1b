"""``numamem nri``'s handler: the runtime's events as the daemon's RPCs, with the kubelet's
memory-manager semantics.

=====================  ===================================================================
runtime event          what numamem does
=====================  ===================================================================
Configure              applies the config string (:mod:`numamem.nri.options`)
Synchronize            reconciles both ways (:mod:`numamem.nri.reconciler`)
CreateContainer        admits a Guaranteed container, ``cpuset.mems`` (:mod:`.creation`)
UpdateContainer        ``Resize`` when a pinned container's memory limits change; ``cpuset.mems``
StopContainer          notes it stopped (a regular init container, if a new one follows)
RemoveContainer        ``RemoveContainer`` of its id (not of an older instance's)
RemovePodSandbox       ``ReleasePod`` (not for a sandbox the kubelet replaced)
=====================  ===================================================================

Every daemon RPC made for a runtime call ends well before the runtime's request timeout
(:func:`~numamem.nri.daemonlink.budget_for`). What the runtime sends that cannot be used is
logged once a kind and the container left alone; an error reaches the runtime only to fail a
creation or a resize on purpose. Releases the daemon could not be told are made by the next
reconciliation, which runs as soon as the daemon answers again.

Deliberate deviations from the kubelet (docs/nri-plugin.md): each container is reserved
when the runtime creates it, not all of a pod's at admission; the pod scope is refused
(its hints need every container up front); containers are told apart by what the runtime
shows (:mod:`numamem.nri.podrecord`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from numamem import logging as nlog
from numamem.errors import (
    ConfigError,
    DaemonRefusedError,
    DeadlineExceededError,
    NriStatusError,
    UnavailableError,
    UnusableInputError,
    quote,
)
from numamem.nri import kube, status
from numamem.nri import pluginstate as counters
from numamem.nri.creation import create, created_unpinned, unreachable_message
from numamem.nri.daemonlink import Budget, DaemonLink, budget_for
from numamem.nri.handler import CallContext, Handler
from numamem.nri.logsink import open_log
from numamem.nri.options import PluginOptions, apply_config_leniently
from numamem.nri.pluginstate import PluginState
from numamem.nri.podrecord import Pin
from numamem.nri.reconcile import mems_update
from numamem.nri.reconciler import Reconciler
from numamem.nriapi import api_pb2 as api
from numamem.v1 import memorymanager_pb2 as mm

_log = nlog.get_logger("nri")

EVENTS = (
    api.CREATE_CONTAINER,
    api.UPDATE_CONTAINER,
    api.STOP_CONTAINER,
    api.REMOVE_CONTAINER,
    api.REMOVE_POD_SANDBOX,
)


class MemoryPlugin(Handler):
    """See the module docstring. :meth:`start` before serving, :meth:`stop` after."""

    def __init__(
        self, options: PluginOptions, daemon: DaemonLink | None = None, *, poll: float = 0.5
    ) -> None:
        self.state = PluginState(daemon or DaemonLink(options.socket), options)
        self.reconciler = Reconciler(self.state, poll)
        self.reconfigure_logging = False
        """Whether a config string's log-level, log-format and log-file re-configure logging
        (the command's own logging; tests leave theirs alone)."""
        self.config_source = "the runtime's config string"
        """What the runtime's config string is, for messages (the pre-launched plugin's
        file)."""

    def start(self) -> None:
        self.reconciler.start()

    def stop(self) -> None:
        self.reconciler.stop()
        self.state.daemon.close()

    @property
    def counts(self) -> dict[str, int]:
        """What the plugin did so far (:mod:`numamem.nri.pluginstate`'s counter names)."""
        return self.state.counted()

    def status(self) -> dict[str, object]:
        """For the status socket: the daemon's socket, whether it answered the plugin's last
        call, and the counts (under the counters' own lock, never the plugin's state lock)."""
        state = self.state
        return {
            "daemon_socket": state.daemon.socket,
            "daemon_reachable": not state.daemon.unreachable.is_set(),
            "counts": state.counted(),
        }

    # --- configuration and synchronization ------------------------------------------------

    def configure(self, req: api.ConfigureRequest, ctx: CallContext) -> api.ConfigureResponse:
        """The config string applied over the flags; never refused (containerd 1.7 exits
        when a pre-launched plugin fails to configure): what is wrong is logged, naming the
        key, the value and :attr:`config_source`, and left out."""
        state = self.state
        options, errors = apply_config_leniently(state.options, req.config, self.config_source)
        if options != state.options:
            _log.info("NRI plugin configuration from the runtime", config=req.config[:256])
            if self.reconfigure_logging:
                options = self._relog(options, errors)
            if options.socket != state.options.socket:
                old, state.daemon = state.daemon, DaemonLink(options.socket)
                old.close()
            state.options = options
        for err in errors:
            _log.error(
                "NRI plugin configuration: left out, going on with the flags' value",
                error=str(err),
            )
        mask = 0
        for event in EVENTS:
            mask |= 1 << (event - 1)
        return api.ConfigureResponse(events=mask)

    def _relog(self, options: PluginOptions, errors: list[ConfigError]) -> PluginOptions:
        """Logging re-configured for ``options`` (a log file that cannot be opened is an
        error of the config: the previous one is kept)."""
        try:
            stream = open_log(options.log_file, sys.stderr)
        except ConfigError as err:
            errors.append(err)
            options = replace(options, log_file=self.state.options.log_file)
            stream = open_log(options.log_file, sys.stderr)
        nlog.configure(options.log_level, options.log_format, stream=stream, cache=False)
        return options

    def synchronize(self, req: api.SynchronizeRequest, ctx: CallContext) -> api.SynchronizeResponse:
        """The view replaced; the records rebuilt and the ``cpuset.mems`` updates answered
        when the daemon and the budget allow (the plugin's own work is counted against the
        runtime's deadline), else left to the reconciliation it asks for."""
        state = self.state
        budget = budget_for(ctx)
        updates: list[api.ContainerUpdate] = []

        def replaced() -> None:
            state.view.replace(req.pods, req.containers, owned=True)  # a fresh request
            state.synchronized = state.resynchronized = True
            state.changed()

        try:
            with state.locked(budget):
                replaced()
                try:
                    updates = self.reconciler.quick(budget)
                except (UnavailableError, DeadlineExceededError, DaemonRefusedError) as err:
                    state.dirty.set()
                    _log.warning(
                        "NRI synchronize: reconciling after the reply (the daemon or the "
                        "runtime's deadline did not allow it within)",
                        error=str(err),
                    )
        except UnavailableError:
            state.apply_or_defer(replaced, budget)
        self.reconciler.request()
        if updates:
            _log.info("NRI synchronize: cpuset.mems updated", containers=len(updates))
        return api.SynchronizeResponse(update=updates)

    # --- containers -----------------------------------------------------------------------

    def create_container(
        self, req: api.CreateContainerRequest, ctx: CallContext
    ) -> api.CreateContainerResponse:
        budget, state = budget_for(ctx), self.state
        try:
            with state.locked(budget):
                state.changed()
                return create(state, req.pod, req.container, budget)
        except UnavailableError as err:  # the lock: the creation fails unless unpinned
            text = unreachable_message(req.container.name, kube.describe_sandbox(req.pod), err)
            if state.options.on_reject != "unpinned":
                state.count(counters.FAILED)
                raise NriStatusError(status.UNAVAILABLE, text) from None
            state.apply_or_defer(
                lambda: created_unpinned(state, req.pod, req.container, text), budget
            )
            _log.warning("NRI container starts unpinned (--on-reject=unpinned)", reason=text)
            return api.CreateContainerResponse()

    def update_container(
        self, req: api.UpdateContainerRequest, ctx: CallContext
    ) -> api.UpdateContainerResponse:
        budget = budget_for(ctx)
        with self.state.locked(budget):
            self.state.changed()
            return self._update(req.pod, req.container, req.linux_resources, budget)

    def _update(
        self,
        sandbox: api.PodSandbox,
        container: api.Container,
        resources: api.LinuxResources,
        budget: Budget,
    ) -> api.UpdateContainerResponse:
        state = self.state
        record = state.records.get(kube.sandbox_uid(sandbox))
        entry = record.entries.get(container.name) if record is not None else None
        if record is None or entry is None or entry.container_id != container.id:
            state.view.set_resources(container.id, resources)
            return api.UpdateContainerResponse()
        if entry.pin is not Pin.PINNED:
            state.view.set_resources(container.id, resources)
            return api.UpdateContainerResponse()
        try:
            limits = entry.limits.updated_by(kube.limits_of(resources))
        except UnusableInputError as err:
            state.left_alone(err, pod=record.identity.describe(), container=entry.name)
            return api.UpdateContainerResponse(
                update=[mems_update(entry.container_id, kube.mems_string(entry.nodes))]
            )
        updates = []
        if limits.memory_resources() != entry.limits.memory_resources():
            previous, entry.limits = entry.limits, limits
            pod = record.admission_pod(entry.name)
            try:
                reply: mm.ResizeResponse = state.daemon.call(
                    "Resize",
                    mm.ResizeRequest(pod=pod, container_name=entry.name),
                    budget,
                    f"nri-resize-{container.id[:12]}",
                )
            except (UnavailableError, DeadlineExceededError, DaemonRefusedError) as err:
                entry.limits = previous
                state.count(counters.REFUSED_RESIZES)
                text = (
                    f"numamem refused the resize of container {quote(entry.name)} of pod "
                    f"{record.identity.describe()} to {limits.describe()}: {err}; see why with: "
                    "numamem explain --resize"
                )
                _log.warning("NRI resize refused", reason=text)
                raise NriStatusError(status.UNKNOWN, text) from None
            state.count(counters.RESIZED)
            entry.nodes = tuple(sorted(reply.numa_nodes)) or entry.nodes
            _log.info(
                "NRI container resized",
                pod=record.identity.describe(),
                container=quote(entry.name, style="bare"),
                action=mm.ResizeAction.Name(reply.action),
                numa_nodes=list(entry.nodes),
            )
            updates += [u for u in self._moved(reply) if u.container_id != entry.container_id]
        else:
            entry.limits = limits
        mems = kube.mems_string(entry.nodes)
        resources_copy = api.LinuxResources()
        resources_copy.CopyFrom(resources)
        resources_copy.cpu.mems = mems
        state.view.set_resources(container.id, resources_copy)
        updates.insert(0, mems_update(entry.container_id, mems))
        return api.UpdateContainerResponse(update=updates)

    def _moved(self, reply: mm.ResizeResponse) -> list[api.ContainerUpdate]:
        """Updates for the other containers a resize moved to more nodes (its whole group)."""
        out: list[api.ContainerUpdate] = []
        mems = kube.mems_string(reply.numa_nodes)
        for ref in reply.moved:
            record = self.state.records.get(ref.pod_uid)
            entry = record.entries.get(ref.container_name) if record is not None else None
            if entry is None or entry.stopped:
                continue
            entry.nodes = tuple(sorted(reply.numa_nodes))
            if not any(u.container_id == entry.container_id for u in out):
                out.append(mems_update(entry.container_id, mems))
                self.state.view.set_mems(entry.container_id, mems)
        return out

    def stop_container(
        self, req: api.StopContainerRequest, ctx: CallContext
    ) -> api.StopContainerResponse:
        state, sandbox, container = self.state, req.pod, req.container

        def stopped() -> None:
            state.view.stop(container.id)
            record = state.records.get(kube.sandbox_uid(sandbox))
            if record is not None:
                record.stopped(container.id)

        state.apply_or_defer(stopped, budget_for(ctx))
        return api.StopContainerResponse()

    def remove_container(
        self, req: api.RemoveContainerRequest, ctx: CallContext
    ) -> api.RemoveContainerResponse:
        """Noted before any daemon call (queued if the plugin's state is held past the budget:
        the reconciliation it asks for then makes the release)."""
        budget = budget_for(ctx)
        release: list[bool] = []
        if (
            self.state.apply_or_defer(
                lambda: release.append(self._removed(req.pod, req.container)), budget
            )
            and release[0]
        ):
            self._release(
                "RemoveContainer", mm.RemoveContainerRequest(container_id=req.container.id), budget
            )
        return api.RemoveContainerResponse()

    def _removed(self, sandbox: api.PodSandbox, container: api.Container) -> bool:
        """The removal noted (the caller holds the lock); whether to release it."""
        state = self.state
        state.view.remove_container(container.id)
        state.changed()
        record = state.records.get(kube.sandbox_uid(sandbox))
        if record is None:
            return not state.synchronized  # else: not a Guaranteed pod's, nothing held
        entry, newest = record.removed(container.id, container.name)
        if entry is None or not newest:
            return False  # unknown, or an older instance: its name's memory is the newest's
        # Nothing held: released, or left alone without an id (an admitted one without
        # blocks has its id recorded, which the release removes).
        return not (
            entry.pin is Pin.RELEASED or (entry.pin is Pin.LEFT_ALONE and not entry.id_recorded)
        )

    def remove_pod_sandbox(
        self, req: api.RemovePodSandboxRequest, ctx: CallContext
    ) -> api.RemovePodSandboxResponse:
        budget = budget_for(ctx)
        state, sandbox = self.state, req.pod
        uid = kube.sandbox_uid(sandbox)
        release: list[bool] = []

        def removed() -> None:
            state.view.remove_pod(sandbox.id)
            state.changed()
            if state.view.has_pod(uid):
                release.append(False)  # the kubelet replaced this sandbox
                return
            record = state.records.pop(uid, None)
            release.append(bool(uid) and (record is not None or not state.synchronized))

        if state.apply_or_defer(removed, budget) and release[0]:
            self._release("ReleasePod", mm.ReleasePodRequest(pod_uid=uid), budget)
        return api.RemovePodSandboxResponse()

    def _release(self, method: str, request: object, budget: Budget) -> None:
        """A release, made without the plugin's lock; one the daemon does not get (or, for a
        container id it does not know, an exited container kept by name) is made by the
        next reconciliation."""
        began = time.perf_counter()
        try:
            reply = self.state.daemon.call(method, request, budget)
        except (UnavailableError, DeadlineExceededError, DaemonRefusedError) as err:
            self.state.dirty.set()
            _log.warning(
                "NRI release not made now; the next reconciliation makes it",
                method=method,
                error=str(err),
            )
            return
        if isinstance(reply, mm.RemoveContainerResponse) and not reply.found:
            self.state.dirty.set()  # the name is no longer declared: the reconciliation frees it
        self.state.count(counters.RELEASED)
        _log.debug("NRI release", method=method, seconds=round(time.perf_counter() - began, 6))
