"""An NRI plugin's connection lifecycle: connect, register, serve, reconnect.

Two ways to run, as containerd runs plugins:

* **external**: the plugin connects to the runtime's NRI socket (default
  :data:`DEFAULT_SOCKET`). A runtime restart closes the connection; the plugin
  reconnects with capped exponential backoff and registers again (the runtime
  then configures and synchronizes it afresh). :meth:`Plugin.run` returns only
  after :meth:`Plugin.stop`.
* **pre-launched**: the runtime started the plugin with a connected socket on
  the fd in ``NRI_PLUGIN_SOCKET`` (3) and its name and index in
  ``NRI_PLUGIN_NAME``/``NRI_PLUGIN_IDX`` (:meth:`Plugin.prelaunched`). When the
  connection closes, :meth:`Plugin.run` returns: the process is to exit.

Per connection: a reader thread demultiplexes, handler calls run on a bounded
pool, writes are serialized (:class:`~numamem.nri.rpc.Endpoint`). The plugin
calls RegisterPlugin while the reader already serves, since the runtime may
call Configure before it replies. Every thread a connection started is joined
before :meth:`Plugin.run` moves on or returns.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from numamem.errors import ConfigError, NriConnectionError, NriStatusError, quote
from numamem.logging import get_logger
from numamem.nri.framing import PLUGIN_CONN, RUNTIME_CONN
from numamem.nri.handler import DEFAULT_REGISTRATION_TIMEOUT, Handler, handled_events, overrides
from numamem.nri.problems import ProblemLog
from numamem.nri.rpc import Endpoint
from numamem.nri.service import PLUGIN_SERVICE, RUNTIME_SERVICE, PluginService
from numamem.nriapi import api_pb2 as api

_log = get_logger("nri")

DEFAULT_SOCKET = "/var/run/nri/nri.sock"
ENV_NAME = "NRI_PLUGIN_NAME"
ENV_IDX = "NRI_PLUGIN_IDX"
ENV_SOCKET = "NRI_PLUGIN_SOCKET"

_IDX = re.compile(r"[0-9][0-9]")


@dataclass(frozen=True)
class Backoff:
    """Delays between connection attempts: ``initial``, doubling, at most ``maximum`` seconds.

    The cap is short on purpose: containers the runtime creates while the plugin is
    away are not adjusted (Synchronize reports them later), so the plugin should be
    back within a couple of seconds of the runtime."""

    initial: float = 0.1
    maximum: float = 2.0

    def delays(self) -> Iterable[float]:
        delay = self.initial
        while True:
            yield delay
            delay = min(delay * 2, self.maximum)


class Plugin:
    """One NRI plugin serving ``handler``; see the module docstring. Thread-safe."""

    def __init__(
        self,
        handler: Handler,
        *,
        name: str,
        idx: str,
        socket_path: str = DEFAULT_SOCKET,
        sock: socket.socket | None = None,
        registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
        workers: int = 4,
        max_in_flight: int = 64,
        backoff: Backoff | None = None,
    ) -> None:
        """``sock`` (pre-launched) is the connection to serve instead of connecting to
        ``socket_path``. ``ConfigError`` for a name, an index or a handler the runtime
        would refuse."""
        if not name or "/" in name:
            raise ConfigError(f"NRI plugin name {quote(name)} must be non-empty, without '/'")
        if not _IDX.fullmatch(idx):
            raise ConfigError(
                f"NRI plugin index {quote(idx)} must be two digits (00-99): plugins are called "
                "in ascending index order"
            )
        if not handled_events(handler) and not overrides(handler, "configure"):
            raise ConfigError(
                f"NRI handler {type(handler).__name__} handles no event: override at least one "
                "of its event methods (create_container, remove_container, ...)"
            )
        self._handler = handler
        self.name = name
        self.idx = idx
        self.socket_path = socket_path
        self._sock = sock
        self._registration_timeout = registration_timeout
        self._workers = workers
        self._max_in_flight = max_in_flight
        self._backoff = backoff or Backoff()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._registered = threading.Event()
        self._sessions_changed = threading.Condition()
        self._endpoint: Endpoint | None = None
        self._service: PluginService | None = None
        self._lingering: list[Endpoint] = []
        self.sessions = 0
        """Connections that registered so far."""
        self.failed_connects = 0
        """Connection attempts that failed since the last one that succeeded."""
        self.last_error = ""
        """Why the plugin last failed to connect or register, or lost its connection."""

    @classmethod
    def prelaunched(
        cls, handler: Handler, environ: Mapping[str, str] | None = None, **kwargs: object
    ) -> Plugin:
        """The plugin the runtime launched: socket, name and index from ``environ``
        (default ``os.environ``). ``ConfigError`` naming the variable if one is wrong."""
        env = os.environ if environ is None else environ
        raw = env.get(ENV_SOCKET, "")
        try:
            fd = int(raw)
            if fd < 0:
                raise ValueError(raw)
        except ValueError:
            raise ConfigError(
                f"{ENV_SOCKET}={quote(raw)} is not a file descriptor: a pre-launched NRI plugin "
                "is started by the runtime with its connection there (3)"
            ) from None
        try:
            sock = socket.socket(fileno=fd)
        except OSError as e:
            raise ConfigError(f"{ENV_SOCKET}={fd} is not a usable socket: {e}") from e
        return cls(
            handler,
            name=env.get(ENV_NAME, ""),
            idx=env.get(ENV_IDX, ""),
            sock=sock,
            **kwargs,  # type: ignore[arg-type]
        )

    @staticmethod
    def is_prelaunched(environ: Mapping[str, str] | None = None) -> bool:
        """Whether the runtime launched this process as a plugin (``NRI_PLUGIN_SOCKET`` is set)."""
        return ENV_SOCKET in (os.environ if environ is None else environ)

    # --- running ---------------------------------------------------------------------

    def run(self) -> None:
        """Serve until :meth:`stop` (external) or until the connection closes (pre-launched).
        Returns once every thread it started has finished."""
        try:
            self._run()
        finally:
            for endpoint in self._lingering:
                endpoint.join_handlers()
            self._lingering.clear()

    def _run(self) -> None:
        if self._sock is not None:
            self._session(self._sock, f"{self.idx}-{self.name}@prelaunched")
            return
        delays = iter(self._backoff.delays())
        while not self._stopping.is_set():
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(self.socket_path)
            except OSError as e:
                sock.close()
                self.failed_connects += 1
                self.last_error = f"NRI runtime not reachable on {self.socket_path}: {e}"
                if self.failed_connects == 1:
                    _log.warning(
                        "NRI runtime not reachable; retrying with backoff",
                        socket=self.socket_path,
                        error=str(e),
                    )
                self._stopping.wait(next(delays))
                continue
            if self.failed_connects:
                _log.info(
                    "NRI runtime reachable again",
                    socket=self.socket_path,
                    failed_attempts=self.failed_connects,
                )
                self.failed_connects = 0
            if self._session(sock, f"{self.idx}-{self.name}@{self.socket_path}"):
                delays = iter(self._backoff.delays())
            if not self._stopping.is_set():
                delay = next(delays)
                _log.info(
                    "NRI connection closed; reconnecting", socket=self.socket_path, delay=delay
                )
                self._stopping.wait(delay)

    def stop(self) -> None:
        """Close the connection and make :meth:`run` return (any thread, handlers included)."""
        with self._lock:
            self._stopping.set()
            endpoint = self._endpoint
        if endpoint is not None:
            endpoint.close()

    def wait_registered(self, timeout: float | None = None, *, sessions: int = 1) -> bool:
        """Wait until a connection is registered and at least ``sessions`` connections have
        registered in all (a reconnect: ``sessions=2``); False on timeout."""
        with self._sessions_changed:
            return self._sessions_changed.wait_for(
                lambda: self._registered.is_set() and self.sessions >= sessions, timeout
            )

    def status(self) -> dict[str, object]:
        """What a probe needs (:mod:`numamem.nri.statusserver`): whether the plugin is
        registered now, how often it registered, and the runtime or the last failure.
        Takes no lock a handler holds."""
        service = self._service
        return {
            "plugin": f"{self.idx}-{self.name}",
            "mode": "pre-launched" if self._sock is not None else "external",
            "nri_socket": None if self._sock is not None else self.socket_path,
            "registered": self._registered.is_set(),
            "sessions": self.sessions,
            "failed_connects": self.failed_connects,
            "last_error": self.last_error,
            "runtime": service.runtime if service is not None else "",
        }

    @property
    def service(self) -> PluginService | None:
        """The current connection's service state (configuration, timeouts), if connected."""
        with self._lock:
            return self._service

    @property
    def problems(self) -> ProblemLog | None:
        """The current connection's problem counts, if connected."""
        with self._lock:
            return self._endpoint.problems if self._endpoint is not None else None

    def update_containers(
        self,
        update: Iterable[api.ContainerUpdate],
        evict: Iterable[api.ContainerEviction] = (),
        timeout: float | None = None,
    ) -> list[api.ContainerUpdate]:
        """Ask the runtime for unsolicited container updates (and evictions); the updates it
        failed to apply. ``NriConnectionError`` when not registered; ``NriStatusError`` when
        the runtime refuses. ``timeout`` defaults to the runtime's request timeout."""
        with self._lock:
            endpoint, service = self._endpoint, self._service
        if endpoint is None or service is None or not self._registered.is_set():
            raise NriConnectionError(
                f"NRI plugin {self.idx}-{self.name} is not registered with the runtime"
            )
        request = api.UpdateContainersRequest(update=update, evict=evict)
        reply = endpoint.call(
            RUNTIME_SERVICE,
            "UpdateContainers",
            request,
            api.UpdateContainersResponse,
            service.request_timeout if timeout is None else timeout,
        )
        return list(reply.failed)

    def _session(self, sock: socket.socket, peer: str) -> bool:
        """Register and serve one connection until it closes; whether it registered."""
        endpoint = Endpoint(
            sock,
            peer=peer,
            serve_conn=PLUGIN_CONN,
            call_conn=RUNTIME_CONN,
            services={},
            workers=self._workers,
            max_in_flight=self._max_in_flight,
        )
        service = PluginService(self._handler, endpoint.problems)
        endpoint.serve(PLUGIN_SERVICE, service.methods())
        with self._lock:
            if self._stopping.is_set():
                sock.close()
                return False
            self._endpoint, self._service = endpoint, service
        registered = False
        try:
            endpoint.start()
            request = api.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.idx)
            try:
                endpoint.call(
                    RUNTIME_SERVICE,
                    "RegisterPlugin",
                    request,
                    api.Empty,
                    self._registration_timeout,
                )
            except NriStatusError as e:  # refused, or no answer within the registration timeout
                _log.error("NRI registration failed", peer=peer, code=e.code, reason=e.message)
                self.last_error = f"registration refused by the runtime: {e.message}"
                endpoint.close()
            except NriConnectionError as e:
                _log.warning("NRI connection closed before registration", peer=peer, error=str(e))
                self.last_error = f"connection closed before registration: {e}"
            else:
                registered = True
                with self._sessions_changed:
                    self.sessions += 1
                    self._registered.set()
                    self._sessions_changed.notify_all()
                _log.info("NRI plugin registered", peer=peer)
            endpoint.wait_closed()
            if registered:
                self.last_error = "the runtime closed the connection"
        finally:
            with self._lock:
                self._endpoint = self._service = None
            with self._sessions_changed:
                self._registered.clear()
            # A handler still running (one the runtime gave up on) must not delay the reconnect;
            # run() waits for it before it returns.
            endpoint.shutdown(wait_handlers=False)
            self._lingering.append(endpoint)
            for done in [e for e in self._lingering if not e.busy]:
                done.join_handlers()
                self._lingering.remove(done)
        return registered
