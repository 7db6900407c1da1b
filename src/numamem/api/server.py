"""Daemon bootstrap: directories, single-instance lock, unix socket, health, shutdown.

Start-up is ordered so that a refused start changes nothing on disk (each step
refuses with one clear line on failure):

1. existing state and socket dirs are checked: not writable by other users
   (unless ``--allow-shared-dirs``);
2. components are built: configuration checks and topology discovery, no I/O
   beyond reading;
3. missing directories are created (state dir 0700, socket dir 0750), the lock
   ``<state-dir>/numamem.lock`` taken (``flock``, non-blocking, nothing written to
   it yet: grpcio silently replaces a live socket file, so the lock is what protects
   a running daemon) and a state dir numamem cannot write checkpoints in refused;
4. components **load**: checkpoints are read and validated, TCP listeners are
   bound; nothing is written;
5. the socket path is made free (a socket that refuses connections, left by a
   crash, is removed; a live one, one in doubt or a non-socket file is refused,
   never deleted), the server binds it with umask 0117 (mode 0660 from the first
   instant; :mod:`numamem.api.sockets`) and starts; health reports NOT_SERVING
   and numamem services answer UNAVAILABLE;
6. components **start**: initial checkpoints are written, background work
   begins; the lock file gets this pid; then health reports SERVING.

A refusal at any step undoes what the start did: the socket goes, a lock file
and directories that this start created are removed. While any checkpoint's
durability is unknown (a directory sync failed after its rename), health
reports NOT_SERVING; a later successful write of that checkpoint restores it.

Concurrency: numamem RPCs run on ``--workers`` threads, and at most
``--max-concurrent-rpcs`` may be running or queued; beyond that they are
answered RESOURCE_EXHAUSTED at once. Health checks run on a pool of their own,
so they answer under any load; health and reflection are never refused (Watch
and reflection, streams a client can hold open, run on the workers).

Shutdown (SIGTERM/SIGINT): health NOT_SERVING, stop accepting, in-flight RPCs
get ``--shutdown-grace`` seconds, components close, the socket is removed if it is
still the one this daemon bound (another process's socket at the path is left).

Under systemd (``Type=notify``), :class:`~numamem.api.sdnotify.Notifier` reports each step
as ``STATUS=``, ``READY=1`` the first time health is SERVING (at the end of the start, or
later, when a checkpoint whose durability was unknown is written again), ``STATUS=`` with
the reason while health is NOT_SERVING, ``STOPPING=1`` at shutdown, and pings the
watchdog from the serving loop after a liveness probe through the RPC worker pool and the
components' writer locks succeeded (:mod:`numamem.api.watchdog`).

The parts the daemon drives live beside it: :mod:`numamem.api.component` (what a component
is), :mod:`numamem.api.health` (the health servicer and its TCP server),
:mod:`numamem.api.executor` (the counting worker pool) and :mod:`numamem.api.servingstatus`
(health and the service manager's status under unknown durability).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from numamem.api.component import (
    Component,
    ComponentFactory,
    component_label,
    service_names,
)
from numamem.api.executor import BoundedExecutor
from numamem.api.health import HEALTH_SERVICE, HealthService, start_health_server
from numamem.api.interceptors import Readiness, ServerInterceptor
from numamem.api.sdnotify import Notifier
from numamem.api.servingstatus import ServingStatus
from numamem.api.sockets import BoundSocket, bind_unix_socket
from numamem.api.statedir import LOCK_FILE, check_dir, claim_state_dir, make_dirs, record_pid
from numamem.api.wakeup import signal_wakeup
from numamem.api.watchdog import Watchdog, serving_loop_watchdog
from numamem.config.model import Config
from numamem.logging import get_logger
from numamem.socketpath import check_socket_path, prepare_socket_path
from numamem.work import Courtesy, install_courtesy, uninstall_courtesy

_log = get_logger("server")

GIL_SWITCH_INTERVAL_S = 0.00005
"""How long a thread that wants the GIL waits before it makes the holder give it up (50 µs;
CPython's default is 5 ms). Each RPC retakes the GIL a dozen times or more (after every
syscall and every call into grpcio's core); while another thread runs Python code (a
search, a compaction, another handler) each retake waits up to this long. Measured on 2
vCPUs, ReleasePod p50 while the 40-node prefer-closest pod is admitted in a loop, over its
idle p50 (bench.hard_paths' release scenarios, alone, one after the other): median 2.9 over
nine runs at 0.5 ms (2.1-3.4), 2.3 over eleven at 50 µs (1.7-2.5), no better at 20 µs
(2.1-2.6); ReleasePod beside GetState in a loop and the single-client figures did not move
(Allocate / Health 1.52-1.60 either way). The price is throughput when many threads run
Python code at once (each is made to hand over ten times as often): 8-thread Allocate
lifecycles 198/s at 0.5 ms against 171-181/s at 50 µs, Admit 424 against 366-405 pods/s (one
``make bench`` run against two, disk noise of the same order); short RPCs waiting less
matters more to a node agent than a busy daemon's peak rate."""
DAEMON_UMASK = 0o077  # checkpoint files 0600, directories 0700


@dataclass
class Daemon:
    """One numamem process. Use :meth:`run` from the main thread."""

    config: Config
    component_factory: ComponentFactory
    readiness: Readiness = field(default_factory=Readiness)
    health: HealthService = field(default_factory=HealthService)
    on_serving: Callable[[], None] | None = None
    """Called once the daemon is SERVING (``numamem serve`` then releases its held log lines)."""
    notifier: Notifier = field(default_factory=lambda: Notifier({}))
    """systemd notifications (``numamem serve`` passes its environment's ``NOTIFY_SOCKET``)."""
    courtesy: Courtesy = field(default_factory=Courtesy)
    """The unary RPCs running, for courteous searches to give way to (:mod:`numamem.work`);
    installed for the process from :meth:`start` to :meth:`shutdown` (or a refused start).
    With two daemons in one process (tests), the one started last and still running is
    installed."""
    _stopping_sent: bool = False
    _signal: int | None = None
    _wake: tuple[int, int] | None = None
    """The self-pipe a signal handler writes to (read end, write end), open while run() runs."""
    _lock_fd: int | None = None
    _server: grpc.Server | None = None
    _health_server: grpc.Server | None = None
    _bound: BoundSocket | None = None
    """The socket this daemon bound (removed at shutdown only while it is still that one)."""
    _fast_pool: futures.ThreadPoolExecutor | None = None
    _pool: BoundedExecutor | None = None
    """The RPC worker pool (the watchdog's probe runs there)."""
    watchdog: Watchdog | None = None
    """The serving loop's watchdog while it runs with ``WatchdogSec=`` (its counters)."""
    _components: Sequence[Component] = ()
    _created: list[Path] = field(default_factory=list)
    _status: ServingStatus = field(init=False)
    """What health and the service manager are told (durability reports go there)."""
    interceptor: ServerInterceptor | None = None
    set_umask: bool = True
    """The daemon runs with umask 0077; in-process test servers leave the host process's umask alone."""

    def __post_init__(self) -> None:
        self._status = ServingStatus(self.health, self.readiness, self.notifier, self.config.socket)

    def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT, shut down. Returns the exit code."""
        # A thread back from an fsync must retake the GIL from threads running Python
        # code; CPython makes it wait up to the switch interval (GIL_SWITCH_INTERVAL_S). The
        # checkpoint writer is such a thread, and every durable RPC waits for it.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        self._wake = (read_end, write_end)
        try:
            with signal_wakeup(self._on_signal, write_end):  # from any thread (api/wakeup.py)
                self.start()
                if self.on_serving is not None:
                    self.on_serving()
                self._serve_until_stopped()
        finally:
            self.shutdown()
            self.notifier.close()
            self._wake = None
            os.close(read_end)
            os.close(write_end)
        return 0

    def _serve_until_stopped(self) -> None:
        """The serving loop of the main thread: waits for SIGTERM/SIGINT (a byte on the
        self-pipe), and meanwhile, with ``WatchdogSec=``, runs the watchdog's liveness probe
        every half period and pings only when it succeeded (:mod:`numamem.api.watchdog`;
        a probe that ends writes to the self-pipe too)."""
        assert self._wake is not None
        watchdog = self.watchdog = self._watchdog()
        try:
            while self._signal is None:
                timeout = None if watchdog is None else watchdog.tick()
                if select.select([self._wake[0]], [], [], timeout)[0]:
                    os.read(self._wake[0], 512)  # readable: does not block
        finally:
            if watchdog is not None:
                watchdog.close()
        name = signal.Signals(self._signal).name if self._signal is not None else "?"
        _log.info("signal received, shutting down", signal=name)

    def _watchdog(self) -> Watchdog | None:
        """The liveness probe behind ``WATCHDOG=1`` (None: no watchdog, or no pool: a daemon
        that never served)."""
        pool, wake = self._pool, self._wake
        if pool is None or wake is None:
            return None
        return serving_loop_watchdog(
            self.notifier,
            pool,
            self.config.workers,
            lambda: pool.in_flight,
            lambda: self._components,
            wake[1],
            self.config.socket,
        )

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Record the signal and wake the serving loop; nothing else. A Python signal handler
        runs on the main thread between two bytecodes, possibly while that thread holds a
        lock (the log stream's, an Event's condition): taking any lock here (logging,
        ``Event.set``) could wait forever for the thread it interrupted. ``os.write`` to a
        non-blocking pipe takes none; a full pipe already holds a wake-up."""
        self._signal = signum
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"\0")

    def start(self) -> None:
        """Steps 1-6 of the module docstring. On error, everything this start did is undone
        (and the service manager is told why)."""
        install_courtesy(self.courtesy)  # before any server is built
        try:
            self._start()
        except BaseException as err:
            uninstall_courtesy(self.courtesy)
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            self.notifier.status(f"start refused: {why}")
            raise

    def _start(self) -> None:
        cfg = self.config
        if self.set_umask:
            os.umask(DAEMON_UMASK)
        state_dir, socket_dir = Path(cfg.state_dir), Path(cfg.socket).parent
        check_dir(state_dir, "--state-dir", cfg.allow_shared_dirs)
        check_dir(socket_dir, "--socket directory", cfg.allow_shared_dirs)
        check_socket_path(cfg.socket)
        notify = self.notifier.status
        notify("discovering the topology and checking the configuration")
        self._components = self.component_factory(cfg)
        names = service_names(self._components)
        try:
            self._created += make_dirs(state_dir, 0o700, "--state-dir")
            self._created += make_dirs(socket_dir, 0o750, "--socket directory")
            self._lock_fd, lock_created = claim_state_dir(state_dir)
            if lock_created:
                self._created.append(state_dir / LOCK_FILE)
            for component in self._components:
                notify(f"restoring: {component_label(component)}")
                component.load()
                component.watch_durability(self._status.report)
            notify(f"binding {cfg.socket}")
            self._serve(cfg, names)
            for component in self._components:
                notify(f"starting: {component_label(component)}")
                component.start()
            record_pid(self._lock_fd)
        except BaseException:
            self.shutdown()
            self._undo()
            raise
        self._status.serving(names)
        _log.info("serving", services=names)

    def _serve(self, cfg: Config, names: Sequence[str]) -> None:
        """Step 5: bind the socket and serve (health NOT_SERVING, numamem RPCs UNAVAILABLE)."""
        prepare_socket_path(cfg.socket)
        for name in ("", *names):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        pool = self._pool = BoundedExecutor(cfg.workers, "rpc")
        self._fast_pool = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")
        self.interceptor = ServerInterceptor(
            self.readiness,
            in_flight=lambda: pool.in_flight,
            max_in_flight=cfg.limits.max_concurrent_rpcs,
            fast_pool=self._fast_pool,
            max_reply_bytes=cfg.limits.max_message_bytes,
            courtesy=self.courtesy,
        )
        for component in self._components:
            observe = getattr(component, "observe_rpc", None)
            if observe is not None:
                self.interceptor.add_observer(observe)
        options = [
            ("grpc.max_receive_message_length", cfg.limits.max_message_bytes),
            ("grpc.max_send_message_length", cfg.limits.max_message_bytes),
        ]
        server = grpc.server(pool, interceptors=[self.interceptor], options=options)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for component in self._components:
            component.register(server)
        reflection.enable_server_reflection(
            (*names, HEALTH_SERVICE, reflection.SERVICE_NAME), server
        )
        self._server = server
        self._bound = bind_unix_socket(server, cfg.socket, "--socket")
        server.start()
        if cfg.health_port is not None:
            self._health_server = start_health_server(
                self.health, cfg.health_address, cfg.health_port, self.interceptor
            )
        _log.info(
            "listening",
            socket=cfg.socket,
            health=None if cfg.health_port is None else f"{cfg.health_address}:{cfg.health_port}",
        )

    # --- shutdown -------------------------------------------------------------------

    def shutdown(self) -> None:
        """Graceful stop. Idempotent; safe after a failed :meth:`start`."""
        if self.readiness.is_ready() and not self._stopping_sent:
            self._stopping_sent = True
            self.notifier.stopping()
        self.readiness.set_stopping()
        self.health.enter_graceful_shutdown()
        grace = self.config.shutdown_grace_seconds
        events = [s.stop(grace) for s in (self._server, self._health_server) if s is not None]
        for event in events:
            event.wait()
        self._server = self._health_server = None
        if self._fast_pool is not None:
            self._fast_pool.shutdown(wait=False)
            self._fast_pool = None
        for component in reversed(self._components):
            try:
                component.stop()
            except Exception:  # noqa: BLE001 - shutdown continues past a failing component
                _log.exception("component stop failed")
        self._components = ()
        if self._bound is not None:
            self._bound.remove()
            self._bound = None
        uninstall_courtesy(self.courtesy)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
            _log.info("stopped")

    def _undo(self) -> None:
        """After a refused start: remove the lock file and directories this start created."""
        for path in reversed(self._created):
            with contextlib.suppress(OSError):
                if path.is_dir():
                    path.rmdir()  # only if empty: nothing but what this start made
                else:
                    path.unlink()
        self._created = []
