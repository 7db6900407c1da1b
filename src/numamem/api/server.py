"""Daemon bootstrap: directories, single-instance lock, unix socket, health, shutdown.

Start-up order (each step refuses with one clear line on failure):

1. state dir (created 0700) and socket dir (created 0750) exist and are not
   writable by other users (unless ``--allow-shared-dirs``);
2. the single-instance lock ``<state-dir>/numamem.lock`` is taken
   (``flock``, non-blocking): grpcio silently replaces a live socket file, so
   the lock is what protects a running daemon;
3. the socket path is free: a stale socket from a crash is removed; a live one
   (another process answers) or a non-socket file is refused, never deleted;
4. components are built (topology discovery, configuration checks);
5. the server binds the socket with umask 0117 (mode 0660 from the first
   instant) and starts; health reports NOT_SERVING and numamem services answer
   UNAVAILABLE;
6. components restore their checkpoints; then health reports SERVING.

Shutdown (SIGTERM/SIGINT): health NOT_SERVING, stop accepting, in-flight RPCs
get ``--shutdown-grace`` seconds, components close, the socket is removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from numamem.api.interceptors import Readiness, ServerInterceptor
from numamem.config.model import Config
from numamem.errors import StartupError
from numamem.logging import get_logger

_log = get_logger("server")

LOCK_FILE = "numamem.lock"
GIL_SWITCH_INTERVAL_S = 0.0005
MAX_SOCKET_PATH = 107
SOCKET_UMASK = 0o117  # socket 0660
DAEMON_UMASK = 0o077  # checkpoint files 0600, directories 0700


class Component(Protocol):
    """A part of the daemon that serves gRPC services and may own state.

    ``register`` adds servicers to the server; ``start`` restores state and
    begins background work (health becomes SERVING only after every component
    started); ``stop`` ends background work and is idempotent.
    """

    service_names: Sequence[str]

    def register(self, server: grpc.Server) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


ComponentFactory = Callable[[Config], Sequence[Component]]


@dataclass
class Daemon:
    """One numamem process. Use :meth:`run` from the main thread."""

    config: Config
    component_factory: ComponentFactory
    readiness: Readiness = field(default_factory=Readiness)
    health: health.HealthServicer = field(default_factory=health.HealthServicer)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock_fd: int | None = None
    _server: grpc.Server | None = None
    _health_server: grpc.Server | None = None
    _components: Sequence[Component] = ()
    interceptor: ServerInterceptor | None = None
    set_umask: bool = True
    """The daemon runs with umask 0077; in-process test servers leave the host process's umask alone."""

    def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT, shut down. Returns the exit code."""
        # A thread back from an fsync must retake the GIL from threads running Python
        # code; CPython makes it wait up to the switch interval (5 ms by default). The
        # checkpoint writer is such a thread, and every durable RPC waits for it.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            self.start()
            self._stop.wait()
        finally:
            self.shutdown()
        return 0

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        _log.info("signal received, shutting down", signal=signal.Signals(signum).name)
        self._stop.set()

    def start(self) -> None:
        """Steps 1-6 of the module docstring. On error, everything taken is released."""
        cfg = self.config
        if self.set_umask:
            os.umask(DAEMON_UMASK)
        _ensure_dir(Path(cfg.state_dir), 0o700, "--state-dir", cfg.allow_shared_dirs)
        _ensure_dir(Path(cfg.socket).parent, 0o750, "--socket directory", cfg.allow_shared_dirs)
        self._lock_fd = acquire_lock(Path(cfg.state_dir) / LOCK_FILE)
        prepare_socket_path(cfg.socket)
        self._components = self.component_factory(cfg)
        names = [n for c in self._components for n in c.service_names]
        if len(set(names)) != len(names):
            raise StartupError(f"internal error: a service is registered twice: {sorted(names)}")
        for name in ("", *names):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

        self.interceptor = ServerInterceptor(self.readiness)
        for component in self._components:
            observe = getattr(component, "observe_rpc", None)
            if observe is not None:
                self.interceptor.add_observer(observe)
        options = [
            ("grpc.max_receive_message_length", cfg.limits.max_message_bytes),
            ("grpc.max_send_message_length", cfg.limits.max_message_bytes),
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="rpc"),
            interceptors=[self.interceptor],
            options=options,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for component in self._components:
            component.register(server)
        reflection.enable_server_reflection(
            (
                *names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        self._server = server
        old_umask = os.umask(SOCKET_UMASK)
        try:
            server.add_insecure_port(f"unix://{cfg.socket}")
        except RuntimeError as err:
            raise StartupError(
                f"--socket {cfg.socket!r}: cannot bind the unix socket: {err}"
            ) from err
        finally:
            os.umask(old_umask)
        os.chmod(cfg.socket, 0o660)
        server.start()
        if cfg.health_port is not None:
            self._health_server = _start_health_server(self.health, cfg.health_port)
        _log.info("listening", socket=cfg.socket, health_port=cfg.health_port)

        for component in self._components:
            component.start()
        for name in ("", *names):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.readiness.set_ready()
        _log.info("serving", services=names)

    def shutdown(self) -> None:
        """Graceful stop. Idempotent; safe after a failed :meth:`start`."""
        self.readiness.set_stopping()
        self.health.enter_graceful_shutdown()
        grace = self.config.shutdown_grace_seconds
        events = [s.stop(grace) for s in (self._server, self._health_server) if s is not None]
        for event in events:
            event.wait()
        self._server = self._health_server = None
        for component in reversed(self._components):
            try:
                component.stop()
            except Exception:  # noqa: BLE001 - shutdown continues past a failing component
                _log.exception("component stop failed")
        self._components = ()
        if events:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(self.config.socket).st_mode):
                    os.unlink(self.config.socket)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
            _log.info("stopped")


def _start_health_server(servicer: health.HealthServicer, port: int) -> grpc.Server:
    """A TCP server that carries only grpc.health.v1 (kubelet native gRPC probes)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="health"))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    try:
        server.add_insecure_port(f"[::]:{port}")
    except RuntimeError as err:
        raise StartupError(f"--health-port {port}: cannot listen: {err}") from err
    server.start()
    return server


def _ensure_dir(path: Path, mode: int, what: str, allow_shared: bool) -> None:
    """Create ``path`` with ``mode`` if missing; refuse one other users may write to."""
    if not path.exists():
        try:
            path.mkdir(parents=True, mode=mode)
            os.chmod(path, mode)
        except OSError as err:
            raise StartupError(f"{what} {str(path)!r}: cannot create: {err.strerror}") from err
        return
    try:
        st = os.stat(path)
    except OSError as err:
        raise StartupError(f"{what} {str(path)!r}: cannot stat: {err.strerror}") from err
    if not stat.S_ISDIR(st.st_mode):
        raise StartupError(f"{what} {str(path)!r}: exists and is not a directory")
    if allow_shared:
        return
    uid = os.geteuid()
    problem = ""
    if st.st_uid not in (uid, 0):
        problem = f"is owned by uid {st.st_uid}, not by this user ({uid}) or root"
    elif st.st_mode & stat.S_IWOTH:
        problem = f"is world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
    elif st.st_mode & stat.S_IWGRP and st.st_gid not in (os.getegid(), *os.getgroups()):
        problem = f"is writable by group {st.st_gid} (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise StartupError(
            f"{what} {str(path)!r} {problem}: another user could replace numamem's files; "
            "fix its owner/mode or pass --allow-shared-dirs"
        )


def acquire_lock(path: Path) -> int:
    """Take the single-instance lock; the returned fd holds it until closed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as err:
        raise StartupError(f"lock file {str(path)!r}: cannot open: {err.strerror}") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        holder = ""
        with contextlib.suppress(OSError, ValueError):
            holder = f" (pid {int(os.pread(fd, 32, 0).decode().strip())})"
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise StartupError(
                f"another numamem{holder} is running on state dir {str(path.parent)!r} "
                f"(lock {str(path)!r} is held); stop it or choose another --state-dir"
            ) from err
        raise StartupError(f"lock file {str(path)!r}: cannot lock: {err.strerror}") from err
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def prepare_socket_path(path: str, flag: str = "--socket") -> None:
    """Make ``path`` free for binding, or refuse; never deletes anything but a dead socket.

    ``flag`` names the option the path came from, for the messages.
    """
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise StartupError(
            f"{flag} {path!r} is {len(path.encode())} bytes long; unix socket paths are limited "
            f"to {MAX_SOCKET_PATH}: choose a shorter path"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise StartupError(
            f"{flag} {path!r} exists and is not a socket; numamem never deletes it: "
            f"remove it yourself or choose another {flag}"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)
        _log.warning("removed stale socket left by an earlier run", socket=path)
        return
    finally:
        probe.close()
    raise StartupError(
        f"{flag} {path!r} is served by another live process; stop it or choose another {flag}"
    )
