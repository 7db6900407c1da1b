"""The plugin's side of one NRI connection: the ``Plugin`` service, served with a :class:`Handler`.

One :class:`PluginService` per connection (a reconnect starts afresh, as the
runtime does: it configures and synchronizes the plugin again). It

* records Configure's timeouts (the request timeout bounds every later call's
  :class:`~numamem.nri.handler.CallContext`) and checks the handler's
  subscription: a mask of 0 becomes the handled events (0 would subscribe to
  all, and an unhandled CreateContainer would fail every container);
* collects Synchronize chunks while ``more`` is set, answering each with
  ``more`` and no update (upstream's runtime drops a plugin that answers a
  partial request otherwise), and calls the handler once with all of them;
* turns a handler's exception into an error status with its message, logged
  once per call with the pod and container it concerns;
* logs a reply that comes after the runtime's deadline (the runtime has
  dropped the plugin by then, and reconnecting is the way back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message as ProtoMessage

from numamem.errors import NriStatusError, NumamemError, quote
from numamem.logging import get_logger
from numamem.nri import handler as hmod
from numamem.nri import problems as kinds
from numamem.nri import status
from numamem.nri.handler import CallContext, Handler
from numamem.nri.problems import ProblemLog
from numamem.nri.rpc import CallInfo, Method
from numamem.nriapi import api_pb2 as api

_log = get_logger("nri")

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"


class PluginService:
    """See the module docstring. Thread-safe: the methods run on the endpoint's workers."""

    def __init__(self, handler: Handler, problems: ProblemLog) -> None:
        self._handler = handler
        self._problems = problems
        self._lock = threading.Lock()
        self.request_timeout = hmod.DEFAULT_REQUEST_TIMEOUT
        self.registration_timeout = hmod.DEFAULT_REGISTRATION_TIMEOUT
        self.events = 0
        self.runtime = ""
        self.configured = threading.Event()
        self.shutdown_requested = threading.Event()
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []

    def methods(self) -> dict[str, Method]:
        """The ``Plugin`` service's methods as the endpoint serves them."""
        h = self._handler

        def plain(
            request_type: type[ProtoMessage], fn: Callable[[Any, CallContext], ProtoMessage]
        ) -> Method:
            return Method(request_type, lambda req, info: self._run(fn, req, info))

        return {
            "Configure": Method(api.ConfigureRequest, self._configure),
            "Synchronize": Method(api.SynchronizeRequest, self._synchronize),
            "Shutdown": Method(api.Empty, self._shutdown),
            "RunPodSandbox": plain(api.RunPodSandboxRequest, h.run_pod_sandbox),
            "StopPodSandbox": plain(api.StopPodSandboxRequest, h.stop_pod_sandbox),
            "RemovePodSandbox": plain(api.RemovePodSandboxRequest, h.remove_pod_sandbox),
            "CreateContainer": self._no_fallback(
                api.CreateContainerRequest, "create_container", api.CreateContainerResponse
            ),
            "UpdateContainer": self._no_fallback(
                api.UpdateContainerRequest, "update_container", api.UpdateContainerResponse
            ),
            "StopContainer": self._no_fallback(
                api.StopContainerRequest, "stop_container", api.StopContainerResponse
            ),
            "RemoveContainer": plain(api.RemoveContainerRequest, h.remove_container),
            "StateChange": plain(api.StateChangeEvent, h.state_change),
        }

    def context(self, info: CallInfo) -> CallContext:
        """The handler's view of a call: the runtime's deadline for it."""
        timeout = self.request_timeout
        if info.timeout is not None:
            timeout = min(timeout, info.timeout)
        return CallContext(info.method, info.received + timeout, self.request_timeout)

    # --- the methods --------------------------------------------------------------------

    def _configure(self, req: api.ConfigureRequest, info: CallInfo) -> api.ConfigureResponse:
        if req.request_timeout > 0:
            self.request_timeout = req.request_timeout / 1000
        if req.registration_timeout > 0:
            self.registration_timeout = req.registration_timeout / 1000
        self.runtime = f"{req.runtime_name} {req.runtime_version}".strip()
        reply: api.ConfigureResponse = self._run(self._handler.configure, req, info)
        if reply.events == 0:
            reply.events = hmod.handled_events(self._handler)
        invalid = reply.events & ~hmod.events_mask(hmod.VALID_EVENTS)
        unhandled = hmod.unhandled_events(self._handler, reply.events)
        if reply.events == 0 or invalid or unhandled:
            names = [hmod.event_name(e) for e in unhandled]
            text = (
                f"the plugin's handler subscribes to events it does not handle: events "
                f"{reply.events:#x}, invalid bits {invalid:#x}, unhandled {names}; "
                "override their methods (or return the events it handles)"
            )
            _log.error("NRI configuration refused", reason=text)
            raise NriStatusError(status.FAILED_PRECONDITION, text)
        self.events = reply.events
        self.configured.set()
        _log.info(
            "NRI plugin configured",
            runtime=self.runtime,
            events=[hmod.event_name(e) for e in hmod.mask_events(reply.events)],
            request_timeout=self.request_timeout,
        )
        return reply

    def _synchronize(self, req: api.SynchronizeRequest, info: CallInfo) -> api.SynchronizeResponse:
        with self._lock:
            self._sync_pods.extend(req.pods)
            self._sync_containers.extend(req.containers)
            if req.more:
                return api.SynchronizeResponse(more=True)
            pods, self._sync_pods = self._sync_pods, []
            containers, self._sync_containers = self._sync_containers, []
        whole = api.SynchronizeRequest(pods=pods, containers=containers, more=False)
        _log.info("NRI synchronize", pods=len(pods), containers=len(containers))
        reply: api.SynchronizeResponse = self._run(self._handler.synchronize, whole, info)
        reply.more = False
        return reply

    def _shutdown(self, req: api.Empty, info: CallInfo) -> api.Empty:
        _log.info("NRI runtime is shutting down", runtime=self.runtime)
        self.shutdown_requested.set()
        reply: api.Empty = self._run(self._handler.shutdown, req, info)
        return reply

    def _no_fallback(self, request_type: type[ProtoMessage], name: str, empty: type[Any]) -> Method:
        """A method the runtime has no StateChange fallback for: unhandled, it answers empty
        (no change) rather than failing the container."""
        fn = getattr(self._handler, name)
        if hmod.overrides(self._handler, name):
            return Method(request_type, lambda req, info: self._run(fn, req, info))

        def unhandled(req: Any, info: CallInfo) -> ProtoMessage:
            self._problems.report(
                kinds.UNSUBSCRIBED_EVENT,
                "NRI request for an event the plugin does not handle answered with no change",
                method=info.method,
            )
            reply: ProtoMessage = empty()
            return reply

        return Method(request_type, unhandled)

    # --- calling the handler -------------------------------------------------------------

    def _run(self, fn: Callable[[Any, CallContext], Any], req: Any, info: CallInfo) -> Any:
        ctx = self.context(info)
        try:
            reply = fn(req, ctx)
        except NriStatusError as e:
            if e.code != status.UNIMPLEMENTED:
                _log.warning(
                    "NRI request refused",
                    method=info.method,
                    code=e.code,
                    reason=e.message,
                    **_about(req),
                )
            raise
        except NumamemError as e:
            _log.warning("NRI request failed", method=info.method, reason=str(e), **_about(req))
            raise NriStatusError(status.UNKNOWN, str(e)) from e
        except Exception as e:
            _log.exception("NRI handler failed", method=info.method, **_about(req))
            raise NriStatusError(status.UNKNOWN, f"{type(e).__name__}: {e}") from e
        finally:
            late = time.monotonic() - ctx.deadline
            if late > 0:
                self._problems.report(
                    kinds.LATE_REPLY,
                    "NRI handler answered after the runtime's deadline: the runtime drops the "
                    "plugin for it (it reconnects if external); keep handlers under the timeout",
                    method=info.method,
                    late_seconds=round(late, 3),
                    request_timeout=self.request_timeout,
                )
        return reply


def _about(req: Any) -> dict[str, str]:
    """Log fields naming the pod and container of a request, where it has them."""
    out: dict[str, str] = {}
    pod = getattr(req, "pod", None)
    if isinstance(pod, api.PodSandbox) and req.HasField("pod"):
        out["pod"] = quote(f"{pod.namespace}/{pod.name}", style="bare")
        out["pod_uid"] = quote(pod.uid, style="bare")
    container = getattr(req, "container", None)
    if isinstance(container, api.Container) and req.HasField("container"):
        out["container"] = quote(container.name, style="bare")
        out["container_id"] = quote(container.id, style="bare")
    return out
