"""What an NRI plugin implements: a :class:`Handler`, one typed method per NRI request.

Each method receives the generated request message and a :class:`CallContext`
and returns the generated response message; it runs on a worker thread of the
plugin's bounded pool, concurrently with other calls. Override what the plugin
handles; the rest keep these defaults:

* ``configure`` subscribes to the events whose methods the subclass overrides;
* ``synchronize`` and ``shutdown`` answer empty;
* the lifecycle notifications (``run_pod_sandbox``, ``stop_pod_sandbox``,
  ``remove_pod_sandbox``, ``remove_container``) answer Unimplemented (ttrpc
  status 12): containerd 2.x then delivers them through StateChange, and
  ``state_change`` routes a StateChange to the overridden method (containerd
  1.7 delivers them through StateChange only);
* ``create_container``, ``update_container`` and ``stop_container`` have no
  StateChange fallback: they are only called once subscribed, i.e. overridden.

A method raising :class:`~numamem.errors.NriStatusError` answers that status;
any other exception answers status 2 with its message, which for
CreateContainer fails the container's creation with that message. The runtime
gives every call ``request_timeout`` (2 s unless configured) and disconnects a
plugin that takes longer: :meth:`CallContext.remaining` says how long is left.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from numamem.nri import status
from numamem.nriapi import api_pb2 as api

DEFAULT_REQUEST_TIMEOUT = 2.0
"""Seconds: the runtime's default ``plugin_request_timeout``, used until Configure says."""

DEFAULT_REGISTRATION_TIMEOUT = 5.0
"""Seconds: the runtime's default ``plugin_registration_timeout``."""

VALID_EVENTS = range(api.RUN_POD_SANDBOX, api.LAST)

SUBSCRIBING_METHODS: dict[int, str] = {
    api.RUN_POD_SANDBOX: "run_pod_sandbox",
    api.STOP_POD_SANDBOX: "stop_pod_sandbox",
    api.REMOVE_POD_SANDBOX: "remove_pod_sandbox",
    api.CREATE_CONTAINER: "create_container",
    api.UPDATE_CONTAINER: "update_container",
    api.STOP_CONTAINER: "stop_container",
    api.REMOVE_CONTAINER: "remove_container",
}
"""The events a :class:`Handler` subscribes to by overriding the method named here."""

NO_FALLBACK = frozenset({api.CREATE_CONTAINER, api.UPDATE_CONTAINER, api.STOP_CONTAINER})
"""Events the runtime never delivers through StateChange: their methods must be overridden."""


def event_bit(event: int) -> int:
    """The subscription bit of ``event``: event e sets ``1 << (e - 1)``."""
    if event not in VALID_EVENTS:
        raise ValueError(f"event {event} is not an NRI event (1 .. {api.LAST - 1})")
    return 1 << (event - 1)


def events_mask(events: Iterable[int]) -> int:
    """The ConfigureResponse ``events`` value subscribing to ``events``."""
    mask = 0
    for event in events:
        mask |= event_bit(event)
    return mask


def event_name(event: int) -> str:
    """``event``'s name ("CREATE_CONTAINER"), or its number for one this API does not know."""
    value = api.Event.DESCRIPTOR.values_by_number.get(event)
    return value.name if value is not None else str(event)


def mask_events(mask: int) -> list[int]:
    """The events a subscription mask names (bits outside the valid events are ignored)."""
    return [e for e in VALID_EVENTS if mask & (1 << (e - 1))]


@dataclass(frozen=True)
class CallContext:
    """What a handler method knows of its call besides the request."""

    method: str
    """The NRI method name ("CreateContainer")."""
    deadline: float
    """``time.monotonic()`` by which the runtime expects the reply: the runtime's request
    timeout (or the call's own ttrpc timeout, if sooner) after the request arrived."""
    request_timeout: float
    """The runtime's request timeout in seconds (from Configure; 2 s until then)."""

    def remaining(self) -> float:
        """Seconds left before :attr:`deadline` (0 when past)."""
        return max(0.0, self.deadline - time.monotonic())


class Handler:
    """The base of NRI plugin handlers; see the module docstring for the defaults."""

    def configure(self, req: api.ConfigureRequest, ctx: CallContext) -> api.ConfigureResponse:
        """Configure the plugin (``req.config`` is its configuration string); the response's
        ``events`` is the subscription (0: :func:`handled_events`)."""
        return api.ConfigureResponse(events=handled_events(self))

    def synchronize(self, req: api.SynchronizeRequest, ctx: CallContext) -> api.SynchronizeResponse:
        """Every pod and container the runtime has, all chunks collected (``req.more`` is
        False); the response's ``update`` lists changes to existing containers."""
        return api.SynchronizeResponse()

    def shutdown(self, req: api.Empty, ctx: CallContext) -> api.Empty:
        """The runtime is shutting down (an external plugin reconnects when it is back)."""
        return api.Empty()

    def run_pod_sandbox(
        self, req: api.RunPodSandboxRequest, ctx: CallContext
    ) -> api.RunPodSandboxResponse:
        raise status.unimplemented("RunPodSandbox")

    def stop_pod_sandbox(
        self, req: api.StopPodSandboxRequest, ctx: CallContext
    ) -> api.StopPodSandboxResponse:
        raise status.unimplemented("StopPodSandbox")

    def remove_pod_sandbox(
        self, req: api.RemovePodSandboxRequest, ctx: CallContext
    ) -> api.RemovePodSandboxResponse:
        raise status.unimplemented("RemovePodSandbox")

    def create_container(
        self, req: api.CreateContainerRequest, ctx: CallContext
    ) -> api.CreateContainerResponse:
        """The container's adjustment (``adjust``), updates of other containers (``update``)
        and evictions (``evict``); raising fails the container's creation."""
        raise status.unimplemented("CreateContainer")

    def update_container(
        self, req: api.UpdateContainerRequest, ctx: CallContext
    ) -> api.UpdateContainerResponse:
        """``req.linux_resources`` are the new resources; raising fails the update."""
        raise status.unimplemented("UpdateContainer")

    def stop_container(
        self, req: api.StopContainerRequest, ctx: CallContext
    ) -> api.StopContainerResponse:
        raise status.unimplemented("StopContainer")

    def remove_container(
        self, req: api.RemoveContainerRequest, ctx: CallContext
    ) -> api.RemoveContainerResponse:
        raise status.unimplemented("RemoveContainer")

    def state_change(self, req: api.StateChangeEvent, ctx: CallContext) -> api.Empty:
        """A lifecycle event through StateChange: routed to the overridden method of its event
        (RUN/STOP/REMOVE_POD_SANDBOX, REMOVE_CONTAINER); other events are ignored."""
        event = req.event
        if event == api.RUN_POD_SANDBOX and overrides(self, "run_pod_sandbox"):
            self.run_pod_sandbox(api.RunPodSandboxRequest(pod=req.pod), ctx)
        elif event == api.STOP_POD_SANDBOX and overrides(self, "stop_pod_sandbox"):
            self.stop_pod_sandbox(api.StopPodSandboxRequest(pod=req.pod), ctx)
        elif event == api.REMOVE_POD_SANDBOX and overrides(self, "remove_pod_sandbox"):
            self.remove_pod_sandbox(api.RemovePodSandboxRequest(pod=req.pod), ctx)
        elif event == api.REMOVE_CONTAINER and overrides(self, "remove_container"):
            request = api.RemoveContainerRequest(pod=req.pod, container=req.container)
            self.remove_container(request, ctx)
        return api.Empty()


def overrides(handler: Handler, method: str) -> bool:
    """Whether ``handler``'s class overrides :class:`Handler`'s ``method``."""
    return getattr(type(handler), method) is not getattr(Handler, method)


def handled_events(handler: Handler) -> int:
    """The subscription mask of the events whose methods ``handler`` overrides."""
    return events_mask(e for e, m in SUBSCRIBING_METHODS.items() if overrides(handler, m))


def unhandled_events(handler: Handler, mask: int) -> list[int]:
    """The events of ``mask`` that ``handler`` would answer Unimplemented with no fallback: those
    without an overridden method, unless it overrides ``state_change`` (then only the events
    that have no StateChange fallback)."""
    routed = overrides(handler, "state_change")
    out = []
    for event in mask_events(mask):
        method = SUBSCRIBING_METHODS.get(event)
        if method is not None and overrides(handler, method):
            continue
        if routed and event not in NO_FALLBACK:
            continue
        out.append(event)
    return out
