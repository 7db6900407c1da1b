"""The runtime side of NRI, scripted: what containerd does to a plugin, step by step, for tests.

Built on the plugin's own framing and ttrpc code (:class:`numamem.nri.rpc.Endpoint`
with the roles swapped: the runtime serves ``Runtime`` on connection 2 and calls
``Plugin`` on connection 1), it accepts a plugin on a unix socket (external) or
on a socketpair (pre-launched) and does what containerd's NRI adaptation does,
one call at a time as the test asks::

    runtime = ScriptedRuntime(tmp / "nri.sock").start()
    ...                          # start the plugin (a thread running Plugin.run)
    peer = runtime.accept()      # waits for its RegisterPlugin
    peer.configure("config")     # ConfigureRequest -> the ConfigureResponse
    peer.synchronize(pods, containers, per_message=2)   # chunks while more
    peer.create_container(pod, container)               # the plugin's reply

Behaviour taken from containerd/nri's adaptation: the registration is checked
(non-empty name, two-digit index); only subscribed events are sent; flavor
``"2.x"`` calls the dedicated lifecycle methods and, once the plugin answered
one Unimplemented, sends them all through StateChange; flavor ``"1.7"`` sends
them through StateChange only; a partial Synchronize answered with updates or
without ``more`` drops the plugin ("plugin does not handle split sync
requests"); a call not answered within the request timeout drops the plugin.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

from google.protobuf.message import Message as ProtoMessage

from numamem.errors import NriStatusError
from numamem.nri import status
from numamem.nri.framing import PLUGIN_CONN, RUNTIME_CONN, encode_frames
from numamem.nri.handler import DEFAULT_REGISTRATION_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, event_bit
from numamem.nri.rpc import CallInfo, Endpoint, Method
from numamem.nri.service import PLUGIN_SERVICE, RUNTIME_SERVICE
from numamem.nriapi import api_pb2 as api

M = TypeVar("M", bound=ProtoMessage)

Flavor = Literal["2.x", "1.7"]


class ScriptedRuntime:
    """Accepts plugins and hands each out as a :class:`PluginPeer`; see the module docstring."""

    def __init__(
        self,
        socket_path: Path | None = None,
        *,
        flavor: Flavor = "2.x",
        runtime_name: str = "scripted",
        runtime_version: str = "v0",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
        configure_in_register: str | None = None,
    ) -> None:
        """``configure_in_register``: when set, the RegisterPlugin handler itself calls
        Configure with this config string and waits for its reply before it answers the
        registration (the strongest form of "Configure before the RegisterPlugin reply")."""
        self.socket_path = socket_path
        self.flavor = flavor
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.request_timeout = request_timeout
        self.registration_timeout = registration_timeout
        self.configure_in_register = configure_in_register
        self.peers: list[PluginPeer] = []
        self._listener: socket.socket | None = None

    def start(self) -> ScriptedRuntime:
        """Listen on :attr:`socket_path` (external plugins)."""
        assert self.socket_path is not None, "a socket path is needed to listen"
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.socket_path))
        listener.listen(8)
        self._listener = listener
        return self

    def accept(self, timeout: float = 10.0) -> PluginPeer:
        """The next plugin that connects, once it registered (``TimeoutError`` if none)."""
        assert self._listener is not None, "start() first"
        self._listener.settimeout(timeout)
        sock, _ = self._listener.accept()
        sock.settimeout(None)
        return self._adopt(sock, external=True)

    def prelaunch(self) -> tuple[PluginPeer, socket.socket]:
        """A connected socketpair: the runtime's peer (registered once the plugin serving the
        other end registers: :meth:`PluginPeer.wait_registered`) and the plugin's end."""
        ours, theirs = socket.socketpair()
        peer = PluginPeer(ours, self, external=False)
        self.peers.append(peer)
        return peer, theirs

    def stop(self) -> None:
        """The runtime goes away: the listener and every plugin connection close."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            if self.socket_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self.socket_path.unlink()
        for peer in self.peers:
            peer.close()

    def restart(self) -> ScriptedRuntime:
        """:meth:`stop` then :meth:`start`: external plugins have to reconnect."""
        self.stop()
        return self.start()

    def _adopt(self, sock: socket.socket, *, external: bool) -> PluginPeer:
        peer = PluginPeer(sock, self, external=external)
        self.peers.append(peer)
        peer.wait_registered(self.registration_timeout)
        return peer


class PluginPeer:
    """One plugin connection, seen from the runtime. Methods are called by the test thread."""

    def __init__(self, sock: socket.socket, runtime: ScriptedRuntime, *, external: bool) -> None:
        self.runtime = runtime
        self.external = external
        self.registration: api.RegisterPluginRequest | None = None
        self.configured: api.ConfigureResponse | None = None
        self.update_requests: list[api.UpdateContainersRequest] = []
        self.failed_updates: list[api.ContainerUpdate] = []
        """What the next UpdateContainers answers as failed (tests set it)."""
        self.fallback = False
        self._registered = threading.Event()
        self._refusal: str | None = None
        self.endpoint = Endpoint(
            sock,
            peer="runtime",
            serve_conn=RUNTIME_CONN,
            call_conn=PLUGIN_CONN,
            services={
                RUNTIME_SERVICE: {
                    "RegisterPlugin": Method(api.RegisterPluginRequest, self._register),
                    "UpdateContainers": Method(api.UpdateContainersRequest, self._updates),
                }
            },
        )
        self.endpoint.start()

    # --- the runtime service --------------------------------------------------------------

    def _register(self, req: api.RegisterPluginRequest, info: CallInfo) -> api.Empty:
        if self.external and not req.plugin_name:
            self._refuse("invalid (empty) plugin name")
        if self.external and not re.fullmatch(r"[0-9][0-9]", req.plugin_idx):
            self._refuse(f'invalid plugin index: invalid plugin index "{req.plugin_idx}"')
        self.registration = req
        if self.runtime.configure_in_register is not None:
            self.configure(self.runtime.configure_in_register)
        self._registered.set()
        return api.Empty()

    def _refuse(self, text: str) -> None:
        self._refusal = text
        self._registered.set()
        raise NriStatusError(status.UNKNOWN, text)

    def _updates(
        self, req: api.UpdateContainersRequest, info: CallInfo
    ) -> api.UpdateContainersResponse:
        self.update_requests.append(req)
        return api.UpdateContainersResponse(failed=self.failed_updates)

    # --- what the runtime does ---------------------------------------------------------

    def wait_registered(self, timeout: float | None = None) -> api.RegisterPluginRequest:
        """The plugin's registration; closes the connection and raises ``TimeoutError`` if it
        does not come in time, ``NriStatusError`` if it was refused."""
        wait = self.runtime.registration_timeout if timeout is None else timeout
        if not self._registered.wait(wait):
            self.close()
            raise TimeoutError("plugin registration timed out")
        if self._refusal is not None or self.registration is None:
            raise NriStatusError(status.UNKNOWN, self._refusal or "registration failed")
        return self.registration

    def call(
        self,
        method: str,
        request: ProtoMessage,
        response_type: type[M],
        timeout: float | None = None,
    ) -> M:
        """Call the plugin's ``method``; like the runtime, drop the plugin on a timeout."""
        wait = self.runtime.request_timeout if timeout is None else timeout
        try:
            return self.endpoint.call(PLUGIN_SERVICE, method, request, response_type, wait)
        except NriStatusError as e:
            if e.code == status.DEADLINE_EXCEEDED:
                self.endpoint.close()
            raise

    def configure(self, config: str = "") -> api.ConfigureResponse:
        reply = self.call(
            "Configure",
            api.ConfigureRequest(
                config=config,
                runtime_name=self.runtime.runtime_name,
                runtime_version=self.runtime.runtime_version,
                registration_timeout=int(self.runtime.registration_timeout * 1000),
                request_timeout=int(self.runtime.request_timeout * 1000),
            ),
            api.ConfigureResponse,
        )
        self.configured = reply
        return reply

    def subscribed(self, event: int) -> bool:
        """Whether the plugin subscribed to ``event`` (0 subscribes to all, as upstream)."""
        assert self.configured is not None, "configure() first"
        return self.configured.events == 0 or bool(self.configured.events & event_bit(event))

    def synchronize(
        self,
        pods: Sequence[api.PodSandbox],
        containers: Sequence[api.Container],
        *,
        per_message: int | None = None,
    ) -> list[api.ContainerUpdate]:
        """Send the pods and containers in messages of at most ``per_message`` of each (all at
        once by default); the plugin's updates (from the last reply)."""
        step = per_message or max(len(pods), len(containers), 1)
        start = 0
        while True:
            req = api.SynchronizeRequest(
                pods=pods[start : start + step], containers=containers[start : start + step]
            )
            start += step
            req.more = start < len(pods) or start < len(containers)
            reply = self.call("Synchronize", req, api.SynchronizeResponse)
            if not req.more:
                return list(reply.update)
            if reply.update or not reply.more:
                self.endpoint.close()
                raise NriStatusError(status.UNKNOWN, "plugin does not handle split sync requests")

    def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.CreateContainerResponse | None:
        """The plugin's reply, None when it did not subscribe to CREATE_CONTAINER."""
        if not self.subscribed(api.CREATE_CONTAINER):
            return None
        request = api.CreateContainerRequest(pod=pod, container=container)
        return self.call("CreateContainer", request, api.CreateContainerResponse)

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> api.UpdateContainerResponse | None:
        if not self.subscribed(api.UPDATE_CONTAINER):
            return None
        request = api.UpdateContainerRequest(
            pod=pod, container=container, linux_resources=resources
        )
        return self.call("UpdateContainer", request, api.UpdateContainerResponse)

    def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.StopContainerResponse | None:
        if not self.subscribed(api.STOP_CONTAINER):
            return None
        request = api.StopContainerRequest(pod=pod, container=container)
        return self.call("StopContainer", request, api.StopContainerResponse)

    def run_pod_sandbox(self, pod: api.PodSandbox) -> bool:
        """Whether the event was sent (subscribed); likewise the other lifecycle events."""
        return self._lifecycle(api.RUN_POD_SANDBOX, "RunPodSandbox", pod, None)

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> bool:
        return self._lifecycle(api.STOP_POD_SANDBOX, "StopPodSandbox", pod, None)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> bool:
        return self._lifecycle(api.REMOVE_POD_SANDBOX, "RemovePodSandbox", pod, None)

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> bool:
        return self._lifecycle(api.REMOVE_CONTAINER, "RemoveContainer", pod, container)

    def start_container(self, pod: api.PodSandbox, container: api.Container) -> bool:
        return self._lifecycle(api.START_CONTAINER, "StartContainer", pod, container)

    def state_change(
        self, event: int, pod: api.PodSandbox, container: api.Container | None = None
    ) -> None:
        request = api.StateChangeEvent(event=event, pod=pod)  # type: ignore[arg-type]
        if container is not None:
            request.container.CopyFrom(container)
        self.call("StateChange", request, api.Empty)

    def shutdown(self) -> None:
        self.call("Shutdown", api.Empty(), api.Empty)

    def _lifecycle(
        self, event: int, method: str, pod: api.PodSandbox, container: api.Container | None
    ) -> bool:
        if not self.subscribed(event):
            return False
        if self.runtime.flavor == "1.7" or self.fallback:
            self.state_change(event, pod, container)
            return True
        request = api.RemoveContainerRequest(pod=pod)  # the pod-and-container shape of them all
        if container is not None:
            request.container.CopyFrom(container)
        try:
            self.call(method, request, api.Empty)
        except NriStatusError as e:
            if e.code != status.UNIMPLEMENTED:
                raise
            self.fallback = True
            self.state_change(event, pod, container)
        return True

    # --- the connection ------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        """Bytes on the trunk as they are (malformed input)."""
        self.endpoint.send_raw(data)

    def send_frame(self, conn_id: int, payload: bytes) -> None:
        """One mux frame carrying ``payload`` on ``conn_id``."""
        self.endpoint.send_raw(b"".join(encode_frames(conn_id, payload)))

    def call_raw(self, service: str, method: str, payload: bytes) -> bytes:
        return self.endpoint.call_raw(service, method, payload, self.runtime.request_timeout)

    def close(self) -> None:
        """Drop the plugin and wait for this side's threads (not from a runtime handler)."""
        self.endpoint.shutdown()

    @property
    def closed(self) -> bool:
        return self.endpoint.closed

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self.endpoint.wait_closed(timeout)


def plugin_env(name: str, idx: str, fd: int) -> dict[str, str]:
    """The whole environment containerd gives a pre-launched plugin (no PATH)."""
    return {"NRI_PLUGIN_NAME": name, "NRI_PLUGIN_IDX": idx, "NRI_PLUGIN_SOCKET": str(fd)}


def inheritable(sock: socket.socket) -> int:
    """``sock``'s fd, made inheritable for a child process (pre-launched plugins)."""
    fd = sock.fileno()
    os.set_inheritable(fd, True)
    return fd
