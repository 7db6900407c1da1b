"""The plugin's calls to the numamem daemon: deadlines inside the runtime's, and what an
unreachable daemon means.

The runtime gives each plugin call ``request_timeout`` (2 s by default) and drops a plugin
that answers later, so every daemon RPC made for a runtime call gets a deadline well under
it (:func:`budget_for`: the runtime's deadline less a quarter of the timeout, at least
0.2 s, and never more than :data:`MAX_RPC_SECONDS`). A daemon that does not answer in time
(or is not there) raises :class:`~numamem.errors.UnavailableError` and marks the link
:attr:`DaemonLink.unreachable` until a call succeeds again; the plugin then reconciles
with the daemon (what happened while it was away). Any other error status raises
:class:`~numamem.errors.DaemonRefusedError` with the daemon's reason and message.

Admissions (``Admit``) and declarations of the runtime's pods (``SyncActivePods``) pass one
at a time through :attr:`DaemonLink.gate`, waited for within the call's budget: a
declaration made from a snapshot of the runtime's pods (:meth:`DaemonLink.gated`, the
snapshot checked inside) never releases a container admitted after the snapshot.

Thread-safe (the grpc channel is).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from numamem.client import NumamemClient, error_reason
from numamem.errors import DaemonRefusedError, DeadlineExceededError, UnavailableError, quote
from numamem.nri.handler import CallContext
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1.topology_pb2 import GetMachineInfoRequest

MAX_RPC_SECONDS = 5.0
"""The longest any daemon RPC may take (background reconciliation included)."""
MIN_RPC_SECONDS = 0.01
"""Less than this left: the call is not made (it could not be answered in time)."""

_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
GATED = frozenset({"Admit", "SyncActivePods"})
"""The RPCs that pass through :attr:`DaemonLink.gate`."""


@dataclass(frozen=True)
class Budget:
    """The instant (``time.monotonic()``) by which every daemon RPC of one plugin call must end."""

    deadline: float

    def timeout(self, what: str) -> float:
        """Seconds left for the next RPC; ``DeadlineExceededError`` when too few."""
        left = self.deadline - time.monotonic()
        if left < MIN_RPC_SECONDS:
            raise DeadlineExceededError(
                f"no time left for {what} within the runtime's request timeout: the daemon "
                "answered too slowly"
            )
        return left


def budget_for(ctx: CallContext) -> Budget:
    """The budget of a runtime call (see the module docstring)."""
    margin = max(0.2, ctx.request_timeout / 4)
    return Budget(min(ctx.deadline - margin, time.monotonic() + MAX_RPC_SECONDS))


def background_budget() -> Budget:
    """The budget of one RPC made on the plugin's own initiative (reconciliation)."""
    return Budget(time.monotonic() + MAX_RPC_SECONDS)


@dataclass(frozen=True)
class Settings:
    """What the daemon admits with (``GetState``): the plugin acts on them."""

    memory_manager_policy: str
    topology_manager_policy: str
    topology_manager_scope: str


class DaemonLink:
    """One daemon, reached through :class:`~numamem.client.NumamemClient` on ``socket``."""

    def __init__(self, socket: str, client: NumamemClient | None = None) -> None:
        self.socket = socket
        self.client = client or NumamemClient(socket)
        self._lock = threading.Lock()
        self.unreachable = threading.Event()
        """Set by a call the daemon did not answer; cleared by the next one it answers."""
        self.settings: Settings | None = None
        """From the last GetState (None before the first)."""
        self.gate = threading.RLock()
        """Held across each :data:`GATED` RPC (and by :meth:`gated`)."""
        self.in_flight = 0
        """RPCs under way (for tests: a reconciliation waiting for the daemon)."""
        self._cpu_nodes: dict[int, int] | None = None

    @contextlib.contextmanager
    def gated(self, budget: Budget) -> Iterator[None]:
        """Hold :attr:`gate` (waited for within ``budget``; ``UnavailableError`` if not):
        no other thread admits or declares pods meanwhile."""
        if not self.gate.acquire(timeout=budget.timeout("the daemon's admission gate")):
            raise UnavailableError(
                "another admission or declaration of pods to the numamem daemon did not end "
                "within the runtime's request timeout (a slow daemon)"
            )
        try:
            yield
        finally:
            self.gate.release()

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, request: Any, budget: Budget, request_id: str = "") -> Any:
        """``MemoryManager.<method>(request)`` within ``budget``; see the module docstring."""
        if method in GATED:
            with self.gated(budget):
                return self._call(method, request, budget, request_id)
        return self._call(method, request, budget, request_id)

    def _call(self, method: str, request: Any, budget: Budget, request_id: str) -> Any:
        stub = getattr(self.client.memory, method)
        rid = request_id or f"nri-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self.in_flight += 1
        try:
            reply = self.client.call(stub, request, rid, timeout=budget.timeout(method))
        except grpc.RpcError as err:
            code: grpc.StatusCode = err.code()
            details = str(err.details() or "")
            if code in _UNREACHABLE:
                self.unreachable.set()
                raise UnavailableError(
                    f"the numamem daemon on {quote(self.socket, style='bare')} did not answer "
                    f"{method} ({code.name}: {details}); is it running?"
                ) from None
            raise DaemonRefusedError(code.name, error_reason(err) or "", details) from None
        finally:
            with self._lock:
                self.in_flight -= 1
        self.unreachable.clear()
        return reply

    def cpu_nodes(self, budget: Budget) -> dict[int, int]:
        """CPU id -> its NUMA node, from the daemon's ``GetMachineInfo`` (asked once, then
        kept: the machine does not change under a running daemon). Raises the link's errors."""
        with self._lock:
            known = self._cpu_nodes
        if known is not None:
            return known
        stub = self.client.topology.GetMachineInfo
        try:
            info = self.client.call(
                stub,
                GetMachineInfoRequest(),
                "nri-machine",
                timeout=budget.timeout("GetMachineInfo"),
            )
        except grpc.RpcError as err:
            self.unreachable.set()
            raise UnavailableError(
                f"the numamem daemon on {quote(self.socket, style='bare')} did not answer "
                f"GetMachineInfo ({err.code().name}: {err.details()}); is it running?"
            ) from None
        mapping = {cpu: node.id for node in info.numa_nodes for cpu in node.cpus}
        with self._lock:
            self._cpu_nodes = mapping
        return mapping

    def get_state(self, budget: Budget) -> mm.GetStateResponse:
        """The daemon's state; records its :class:`Settings`."""
        state: mm.GetStateResponse = self.call("GetState", mm.GetStateRequest(), budget)
        with self._lock:
            self.settings = Settings(
                state.policy_name, state.topology_manager_policy, state.topology_manager_scope
            )
        return state

    def current_settings(self, budget: Budget) -> Settings:
        """The settings, read from the daemon the first time (and after it was unreachable)."""
        with self._lock:
            settings = self.settings
        if settings is not None and not self.unreachable.is_set():
            return settings
        state = self.get_state(budget)
        return Settings(
            state.policy_name, state.topology_manager_policy, state.topology_manager_scope
        )
