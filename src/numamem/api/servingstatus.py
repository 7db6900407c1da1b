"""What health and the service manager say while the daemon serves: SERVING, or NOT_SERVING
while the durability of any checkpoint is unknown.

Components report each checkpoint file whose durability is unknown (a directory sync failed
after its rename), and again once a write of it succeeded, to :meth:`ServingStatus.report`
(the :data:`~numamem.api.component.DurabilityReport` the daemon hands them). Until the start
ends, reports are only recorded; :meth:`ServingStatus.serving` (the last step of a start)
sets the health of the server ("") and of every service, marks the daemon ready and tells
the service manager; from then on every report sets health again. The service manager
(:class:`~numamem.api.sdnotify.Notifier`) gets ``READY=1`` the first time health is SERVING
and a ``STATUS=`` line whenever the status or its reason changes. Thread-safe: one lock, so
a report waits for the start's announcement.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from grpc_health.v1 import health_pb2

from numamem.api.health import HealthService
from numamem.api.interceptors import Readiness
from numamem.api.sdnotify import Notifier
from numamem.errors import quote
from numamem.logging import get_logger

_log = get_logger("server")


class ServingStatus:
    """See the module. ``socket`` names the daemon in the SERVING status line."""

    def __init__(
        self, health: HealthService, readiness: Readiness, notifier: Notifier, socket: str
    ) -> None:
        self.health, self.readiness, self.notifier, self.socket = (
            health,
            readiness,
            notifier,
            socket,
        )
        self._durability: dict[str, str] = {}
        self._durability_lock = threading.Lock()
        self._service_names: Sequence[str] = ()
        self._announced = ""
        self._ready_sent = False

    def serving(self, names: Sequence[str]) -> None:
        """The start ended: health of the server and of ``names`` (the services) is set,
        the daemon is ready, and the service manager is told."""
        with self._durability_lock:  # a durability report now waits for health and READY=1
            self._service_names = names
            status = self._serving_status()
            for name in ("", *names):
                self.health.set(name, status)
            self.readiness.set_ready()
            self._announce()

    def report(self, file: str, problem: str | None) -> None:
        """A component's checkpoint ``file`` has an unknown durability (``problem``) or not."""
        with self._durability_lock:
            if problem is None:
                if self._durability.pop(file, None) is None:
                    return
                _log.info("checkpoint durable again", file=file)
            else:
                first = file not in self._durability
                self._durability[file] = problem
                if first:
                    _log.error(
                        "checkpoint durability unknown: NOT_SERVING", file=file, error=problem
                    )
            if not self.readiness.is_ready():
                return
            status = self._serving_status()
            for name in ("", *self._service_names):
                self.health.set(name, status)
            self._announce()

    def _announce(self) -> None:
        """Tell the service manager what health says now (the caller holds the durability
        lock and has just set health): ``READY=1`` the first time it is SERVING, a
        ``STATUS=`` line whenever the status or its reason changes."""
        if not self._durability:
            text = f"serving on {self.socket}"
        else:
            file, problem = min(self._durability.items())
            text = (
                f"not serving: the durability of {file} is unknown "
                f"({quote(problem, style='bare', limit=200)}); serving again once a write of "
                "it succeeds"
            )
        if text == self._announced:
            return
        self._announced = text
        if not self._durability and not self._ready_sent:
            self._ready_sent = True
            self.notifier.ready(text)
        else:
            self.notifier.status(text)

    def _serving_status(self) -> int:
        status: int = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if self._durability
            else health_pb2.HealthCheckResponse.SERVING
        )
        return status
