"""Reconciliations, with their RPCs (the plans are :mod:`numamem.nri.reconcile`'s).

* :meth:`Reconciler.quick`, inside the runtime's Synchronize (two daemon RPCs, within its
  request timeout): SyncActivePods with the runtime's pods, the records rebuilt, and the
  ``cpuset.mems`` updates the Synchronize reply carries;
* :meth:`Reconciler.full`, on the reconciler's own thread after a Synchronize and whenever
  the daemon was unreachable or missed something (:attr:`PluginState.dirty`): the same,
  then, pod by pod, the adoption of the running containers numamem does not hold and the
  runtime ids it has not recorded, with updates sent through the runtime's
  UpdateContainers. It retries every :attr:`Reconciler.poll` seconds until the daemon answers.

Nothing is lost on either side: the daemon's writes are durable before it answers, and
what the plugin could not tell it (a release, an id) it tells at the next reconciliation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from numamem.errors import (
    DaemonRefusedError,
    DeadlineExceededError,
    NriConnectionError,
    NriStatusError,
    UnavailableError,
)
from numamem.logging import get_logger
from numamem.nri import pluginstate as counters
from numamem.nri.creation import add_container, ids_recorded
from numamem.nri.daemonlink import Budget, background_budget
from numamem.nri.pluginstate import PluginState
from numamem.nri.podrecord import Pin
from numamem.nri.reconcile import (
    active_pods,
    adoption_candidates,
    block_nodes,
    mems_updates,
    rebuild,
)
from numamem.nriapi import api_pb2 as api
from numamem.v1 import memorymanager_pb2 as mm

_log = get_logger("nri")

Updater = Callable[[Sequence[api.ContainerUpdate]], Sequence[api.ContainerUpdate]]
"""Sends unsolicited updates to the runtime; returns those it failed to apply."""


class Reconciler:
    """See the module docstring; :meth:`start` its thread, :meth:`stop` it."""

    def __init__(self, state: PluginState, poll: float = 0.5) -> None:
        self.state = state
        self.poll = poll
        self.updater: Updater | None = None
        self.passes = 0
        """Full reconciliations completed."""
        self._deferrals = 0
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    # --- inside a Synchronize ------------------------------------------------------------

    def quick(self, budget: Budget) -> list[api.ContainerUpdate]:
        """SyncActivePods, records rebuilt, mems updates. The caller holds the lock. Raises
        the daemon link's errors (nothing is changed on the plugin's side then)."""
        state = self.state
        daemon_state = state.daemon.get_state(budget)
        reply = mm.SyncActivePodsResponse()
        if state.synchronized:  # else the view holds only what events told: not every pod
            pods = active_pods(state.view)
            reply = state.daemon.call(
                "SyncActivePods", mm.SyncActivePodsRequest(pods=pods), budget, "nri-sync"
            )
        for ref in reply.removed:
            entry = daemon_state.entries.get(ref.pod_uid)
            if entry is not None and ref.container_name in entry.containers:
                del entry.containers[ref.container_name]
        if reply.removed:
            _log.info(
                "NRI reconciliation released what the runtime no longer has",
                containers=[f"{r.pod_uid}/{r.container_name}" for r in reply.removed][:16],
                count=len(reply.removed),
            )
        records, problems = rebuild(state.view, daemon_state, state.records)
        for problem in problems:
            state.count(counters.LEFT_ALONE)
            state.problems.report(
                problem.kind,
                f"NRI container left alone (not pinned): {problem.message}",
                pod_uid=problem.pod_uid,
                container=problem.container,
            )
        state.records = records
        return mems_updates(state.view, records)

    # --- on its own ------------------------------------------------------------------------

    def full(self) -> bool:
        """One full reconciliation (module docstring); whether it completed."""
        state = self.state
        try:
            with state.lock:
                state.dirty.clear()
                updates = self.quick(background_budget())
            for uid in list(state.records):
                with state.lock:
                    updates += self._adopt(uid)
        except (UnavailableError, DeadlineExceededError, DaemonRefusedError) as err:
            state.dirty.set()
            self._deferrals += 1
            if self._deferrals == 1:  # once an outage: the reconciler retries every poll
                _log.info("NRI reconciliation deferred until the daemon answers", error=str(err))
            return False
        if self._deferrals:
            _log.info("NRI reconciliation made after the daemon came back", tries=self._deferrals)
            self._deferrals = 0
        self._send(updates)
        with self._done:
            self.passes += 1
            self._done.notify_all()
        return True

    def _adopt(self, uid: str) -> list[api.ContainerUpdate]:
        state = self.state
        record = state.records.get(uid)
        if record is None:
            return []
        budget = background_budget()
        candidates = adoption_candidates(record)
        adopted = []
        if candidates:
            pod = record.admission_pod(*(e.name for e in candidates))
            ids = {e.name: e.container_id for e in candidates}
            reply: mm.AdmitResponse = state.daemon.call(
                "Admit",
                mm.AdmitRequest(pod=pod, container_ids=ids),
                budget,
                f"nri-adopt-{uid[:12]}",
            )
            if reply.container_ids_recorded:  # in the admission's write (else: below)
                ids_recorded(record, pod, candidates)
            blocks = {c.container_name: c for c in reply.containers}
            for entry in candidates:
                admission = blocks.get(entry.name)
                nodes = block_nodes(admission.blocks) if admission is not None else ()
                if reply.admitted and nodes:
                    entry.pin, entry.nodes = Pin.PINNED, nodes
                    adopted.append(entry)
                    state.count(counters.ADOPTED)
                    continue
                entry.pin = Pin.LEFT_ALONE
                entry.note = (
                    f"{reply.reason}: {reply.message}"
                    if not reply.admitted
                    else (admission.not_pinned_message if admission is not None else "no blocks")
                )
                if not reply.admitted:
                    state.count(counters.NOT_ADOPTED)
                    _log.warning(
                        "NRI running container not adopted: it runs unpinned",
                        pod=record.identity.describe(),
                        container=entry.name,
                        reason=entry.note,
                    )
            if adopted:
                _log.info(
                    "NRI running containers adopted",
                    pod=record.identity.describe(),
                    containers=[e.name for e in adopted],
                )
        unrecorded = [
            e
            for e in record.entries.values()
            if e.pin is Pin.PINNED and not e.stopped and not e.id_recorded
        ]
        if unrecorded:
            pod = record.admission_pod()
            for entry in unrecorded:
                add_container(state, record, pod, entry, budget)
        return mems_updates(state.view, {uid: record})

    def _send(self, updates: list[api.ContainerUpdate]) -> None:
        if not updates or self.updater is None:
            return
        try:
            failed = self.updater(updates)
        except (NriConnectionError, NriStatusError) as err:
            _log.info(
                "NRI updates not sent (the next Synchronize computes them again)",
                count=len(updates),
                error=str(err),
            )
            return
        for update in updates:
            if update not in failed:
                self.state.view.set_mems(update.container_id, update.linux.resources.cpu.mems)
        if failed:
            _log.warning(
                "the runtime failed to apply cpuset.mems updates",
                containers=[u.container_id for u in failed][:16],
            )

    # --- the thread ------------------------------------------------------------------------

    def request(self) -> None:
        """Ask for a full reconciliation soon."""
        self._wanted.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="nri-reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()

    def wait_passes(self, passes: int, timeout: float | None = None) -> bool:
        """Wait until :attr:`passes` reaches ``passes`` (tests); False on timeout."""
        with self._done:
            return self._done.wait_for(lambda: self.passes >= passes, timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wanted.wait(self.poll)
            if self._stopping.is_set():
                return
            owed = self.state.dirty.is_set() or self.state.daemon.unreachable.is_set()
            if not (self._wanted.is_set() or owed):
                continue
            self._wanted.clear()
            try:
                completed = self.full()
            except Exception:  # noqa: BLE001 - a defect must not end reconciliation for good
                _log.exception("NRI reconciliation failed; retrying")
                self.state.dirty.set()
                completed = False
            if not completed:
                self._stopping.wait(self.poll)
