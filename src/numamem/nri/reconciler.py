"""Reconciliations, with their RPCs (the plans are :mod:`numamem.nri.reconcile`'s).

* :meth:`Reconciler.quick`, inside the runtime's Synchronize (one daemon RPC, within its
  request timeout, the plugin's own work counted against it too): the records rebuilt from
  the runtime's view and the daemon's state, and the ``cpuset.mems`` updates the
  Synchronize reply carries (noted in the view, so never sent again);
* :meth:`Reconciler.full`, on the reconciler's own thread after a Synchronize and whenever
  the daemon was unreachable or missed something (:attr:`PluginState.dirty`): the records
  rebuilt, ``SyncActivePods`` with the runtime's pods, then, pod by pod, the adoption of the
  running containers numamem does not hold and the runtime ids it has not recorded, and the
  ``cpuset.mems`` updates sent once through the runtime's UpdateContainers. It retries every
  :attr:`Reconciler.poll` seconds until the daemon answers.

The reconciler never holds the plugin's lock across a daemon or runtime RPC (the runtime's
events must not wait for a slow daemon behind it): each step takes what it needs under the
lock, calls without it, and applies the answer under the lock again only where the records
still describe the same container instances (:attr:`PluginState.version`, the instance ids);
an update is checked against the current decision just before it is sent. Nothing is lost on
either side: the daemon's writes are durable before it answers, and what the plugin could
not tell it (a release, an id) it tells at the next reconciliation.
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
    quote,
)
from numamem.logging import get_logger
from numamem.nri import kube
from numamem.nri import pluginstate as counters
from numamem.nri.creation import ids_recorded
from numamem.nri.daemonlink import Budget, background_budget
from numamem.nri.pluginstate import PluginState
from numamem.nri.podrecord import Entry, Pin
from numamem.nri.reconcile import (
    Problem,
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

SNAPSHOT_TRIES = 5
"""Snapshots a full reconciliation takes before it gives up for this pass when the runtime's
events keep changing the view under it."""


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
        """Records rebuilt, mems updates (noted in the view). The caller holds the lock and
        replaced the view. Raises the daemon link's errors and ``DeadlineExceededError`` when
        the budget runs out (nothing is changed on the plugin's side then)."""
        state = self.state
        daemon_state = state.daemon.get_state(budget)
        what = "rebuilding the records of the runtime's pods"
        records, problems = rebuild(
            state.view,
            daemon_state,
            state.records,
            synchronized=True,
            check=lambda: budget.timeout(what),
        )
        updates = mems_updates(state.view, records)
        budget.timeout("answering the Synchronize")
        self._report(problems)
        state.records = records
        state.resynchronized = False
        for update in updates:
            state.view.set_mems(update.container_id, update.linux.resources.cpu.mems)
        return updates

    # --- on its own ------------------------------------------------------------------------

    def full(self) -> bool:
        """One full reconciliation (module docstring); whether it completed."""
        state = self.state
        try:
            for _ in range(SNAPSHOT_TRIES):
                if self._declare():
                    break
            else:
                state.dirty.set()
                return False
            with state.held():
                uids = list(state.records)
            for uid in uids:
                self._adopt(uid)
        except (UnavailableError, DeadlineExceededError, DaemonRefusedError) as err:
            state.dirty.set()
            self._deferrals += 1
            if self._deferrals == 1:  # once an outage: the reconciler retries every poll
                _log.info("NRI reconciliation deferred until the daemon answers", error=str(err))
            return False
        if self._deferrals:
            _log.info("NRI reconciliation made after the daemon came back", tries=self._deferrals)
            self._deferrals = 0
        with state.held():
            updates = mems_updates(state.view, state.records)
        self._send(updates)
        with self._done:
            self.passes += 1
            self._done.notify_all()
        _log.debug("NRI reconciliation done", passes=self.passes)
        return True

    def _declare(self) -> bool:
        """GetState, records rebuilt, SyncActivePods; False when the runtime's events changed
        the view meanwhile (to be taken again)."""
        state = self.state
        version = state.version
        daemon_state = state.daemon.get_state(background_budget())
        with state.held():
            if state.version != version:
                return False
            state.dirty.clear()
            records, problems = rebuild(
                state.view, daemon_state, state.records, synchronized=state.resynchronized
            )
            self._report(problems)
            state.records = records
            state.resynchronized = False
            if not state.synchronized:  # the view holds only what events told: not every pod
                return True
            pods = active_pods(state.view, records)
        budget = background_budget()
        with state.daemon.gated(budget):
            if state.version != version:  # an event since: its admission may be in no list
                state.dirty.set()
                return False
            reply: mm.SyncActivePodsResponse = state.daemon.call(
                "SyncActivePods", mm.SyncActivePodsRequest(pods=pods), budget, "nri-sync"
            )
        if reply.removed:
            _log.info(
                "NRI reconciliation released what the runtime no longer has",
                containers=[f"{r.pod_uid}/{r.container_name}" for r in reply.removed][:16],
                count=len(reply.removed),
            )
        return True

    def _adopt(self, uid: str) -> None:
        """Admit the pod's running containers numamem does not hold; record the ids it has
        not recorded."""
        state = self.state
        budget = background_budget()
        with state.held():
            record = state.records.get(uid)
            if record is None:
                return
            candidates = [_copy(e) for e in adoption_candidates(record)]
            pod = record.admission_pod(*(e.name for e in candidates)) if candidates else None
        if pod is not None:
            ids = {e.name: e.container_id for e in candidates if e.container_id}
            reply: mm.AdmitResponse = state.daemon.call(
                "Admit",
                mm.AdmitRequest(pod=pod, container_ids=ids),
                budget,
                f"nri-adopt-{uid[:12]}",
            )
            with state.held():
                self._adopted(uid, pod, candidates, reply)
        with state.held():
            record = state.records.get(uid)
            if record is None:
                return
            unrecorded = [
                _copy(e)
                for e in record.entries.values()
                if e.pin is Pin.PINNED and not e.stopped and not e.id_recorded and e.container_id
            ]
            pod = record.admission_pod() if unrecorded else None
        for entry in unrecorded:
            assert pod is not None
            request = mm.AddContainerRequest(
                pod=pod, container_name=entry.name, container_id=entry.container_id
            )
            try:
                state.daemon.call(
                    "AddContainer", request, budget, f"nri-add-{entry.container_id[:12]}"
                )
            except (UnavailableError, DeadlineExceededError, DaemonRefusedError) as err:
                _log.warning(
                    "NRI runtime id not recorded yet",
                    container=quote(entry.name, style="bare"),
                    error=str(err),
                )
                state.dirty.set()
                continue
            with state.held():
                record = state.records.get(uid)
                live = _same_instance(record.entries.get(entry.name) if record else None, entry)
                if record is not None and live is not None:
                    ids_recorded(record, pod, live)

    def _adopted(
        self, uid: str, pod: mm.Pod, candidates: list[Entry], reply: mm.AdmitResponse
    ) -> None:
        """Apply an adoption's answer to the entries still of the same instances (the caller
        holds the lock); one the runtime removed meanwhile is left to the next
        reconciliation, which releases it. The ids the daemon recorded in the admission's
        write (``container_ids_recorded``) are marked recorded (else the AddContainer pass
        below records them)."""
        state = self.state
        record = state.records.get(uid)
        blocks = {c.container_name: c for c in reply.containers}
        adopted = []
        for candidate in candidates:
            live = _same_instance(record.entries.get(candidate.name) if record else None, candidate)
            if live is None or live.pin is not Pin.UNKNOWN:
                state.dirty.set()  # removed (or decided) meanwhile: what was admitted is owed
                continue
            if reply.container_ids_recorded and record is not None and live.container_id:
                ids_recorded(record, pod, live)
            admission = blocks.get(candidate.name)
            nodes = block_nodes(admission.blocks) if admission is not None else ()
            if reply.admitted and nodes:
                live.pin, live.nodes = Pin.PINNED, nodes
                adopted.append(live.name)
                state.count(counters.ADOPTED)
                continue
            live.pin = Pin.LEFT_ALONE
            live.note = (
                f"{reply.reason}: {reply.message}"
                if not reply.admitted
                else (admission.not_pinned_message if admission is not None else "no blocks")
            )
            if not reply.admitted:
                state.count(counters.NOT_ADOPTED)
                _log.warning(
                    "NRI running container not adopted: it runs unpinned",
                    pod=record.identity.describe() if record else quote(uid, style="bare"),
                    container=quote(live.name, style="bare"),
                    reason=live.note,
                )
        if adopted and record is not None:
            _log.info(
                "NRI running containers adopted",
                pod=record.identity.describe(),
                containers=adopted,
            )

    def _report(self, problems: list[Problem]) -> None:
        for problem in problems:
            self.state.count(counters.LEFT_ALONE)
            self.state.problems.report(
                problem.kind,
                f"NRI container left alone (not pinned): {problem.message}",
                pod_uid=problem.pod_uid,
                container=problem.container,
            )

    def _send(self, updates: list[api.ContainerUpdate]) -> None:
        """Send ``updates``, each checked against the current decision just before (a resize
        handled since must not be overwritten by the value computed before it)."""
        if not updates or self.updater is None:
            return
        with self.state.held():
            current = [u for u in updates if self._wanted_now(u)]
        if not current:
            return
        try:
            failed = self.updater(current)
        except (NriConnectionError, NriStatusError) as err:
            _log.info(
                "NRI updates not sent (the next Synchronize computes them again)",
                count=len(current),
                error=str(err),
            )
            return
        with self.state.held():
            for update in current:
                if update not in failed and self._wanted_now(update):
                    self.state.view.set_mems(update.container_id, update.linux.resources.cpu.mems)
        if failed:
            _log.warning(
                "the runtime failed to apply cpuset.mems updates",
                containers=[u.container_id for u in failed][:16],
            )

    def _wanted_now(self, update: api.ContainerUpdate) -> bool:
        """Whether ``update`` still sets what numamem decided for a running pinned container
        (the caller holds the lock)."""
        state = self.state
        container = state.view.container(update.container_id)
        sandbox = state.view.sandbox(container.pod_sandbox_id) if container else None
        if container is None or sandbox is None:
            return False
        record = state.records.get(kube.sandbox_uid(sandbox))
        entry = record.entries.get(container.name) if record is not None else None
        return (
            entry is not None
            and entry.container_id == update.container_id
            and entry.pin is Pin.PINNED
            and not entry.stopped
            and kube.mems_string(entry.nodes) == update.linux.resources.cpu.mems
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


def _copy(entry: Entry) -> Entry:
    """What a step outside the lock needs of an entry (a shallow copy: limits are frozen)."""
    out = Entry(entry.name, entry.container_id, entry.limits, sandbox_id=entry.sandbox_id)
    out.stopped, out.init, out.pin, out.nodes = entry.stopped, entry.init, entry.pin, entry.nodes
    return out


def _same_instance(live: Entry | None, seen: Entry) -> Entry | None:
    """``live`` if it is still the container instance ``seen`` was taken from."""
    if live is None or live.container_id != seen.container_id:
        return None
    return live
