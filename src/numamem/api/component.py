"""What the daemon is built of: :class:`Component` (a part that serves gRPC services and may
own state), the factory that builds them from the configuration, and the durability report
the daemon hands them.

The daemon (:class:`numamem.api.server.Daemon`) drives every component through the same
steps, in the order of its start: built (no I/O beyond reading), ``register``, ``load``
(may refuse the start, writes nothing), ``watch_durability``, ``start``; ``stop`` at
shutdown, also after a refused start. A component reports each checkpoint file whose
durability is unknown, and again once it is durable, through the report it was handed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import grpc

from numamem.config.model import Config
from numamem.errors import StartupError

DurabilityReport = Callable[[str, str | None], None]
"""(checkpoint file, the problem or None once it is durable again)."""


class Component(Protocol):
    """A part of the daemon that serves gRPC services and may own state.

    ``register`` adds servicers to the server; ``load`` reads and validates
    what the component needs (checkpoints, listeners) and may refuse the
    start, but writes nothing; ``start`` writes initial state and begins
    background work (health becomes SERVING only after every component
    started); ``stop`` ends background work and is idempotent.
    ``watch_durability`` hands the component the daemon's durability report.
    """

    service_names: Sequence[str]

    def register(self, server: grpc.Server) -> None: ...

    def load(self) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def watch_durability(self, report: DurabilityReport) -> None: ...


class StatelessComponent:
    """A :class:`Component` that owns no state: ``load``, ``start``, ``stop`` and
    ``watch_durability`` do nothing (there is nothing to read, write or make durable).
    A subclass sets ``service_names`` and adds its servicers in ``register``."""

    service_names: Sequence[str] = ()

    def register(self, server: grpc.Server) -> None:
        raise NotImplementedError

    def load(self) -> None:
        return None

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def watch_durability(self, report: DurabilityReport) -> None:
        return None


ComponentFactory = Callable[[Config], Sequence[Component]]


def service_names(components: Sequence[Component]) -> list[str]:
    """Every service the components serve, in their order; a service named twice is a
    numamem bug (StartupError), refused before anything is created."""
    names = [n for c in components for n in c.service_names]
    if len(set(names)) != len(names):
        raise StartupError(f"internal error: a service is registered twice: {sorted(names)}")
    return names


def component_label(component: object) -> str:
    """``MemoryManagerComponent`` -> ``memory manager``, for status lines."""
    name = type(component).__name__.removesuffix("Component")
    words = "".join(f" {c}" if c.isupper() else c for c in name).split()
    return " ".join(w.lower() for w in words).replace("meta cache", "metacache") or name
