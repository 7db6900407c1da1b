"""The systemd watchdog's liveness probe: ``WATCHDOG=1`` only when requests can be served.

A ping from the serving loop alone proves that the main thread runs, not that an RPC
would be answered: the worker pool may be saturated, a writer may hold a component's lock
forever (a hung fsync, a deadlock). So each ping interval (half ``WatchdogSec=``, see
:mod:`numamem.api.sdnotify`) :class:`Watchdog` submits one probe task to the RPC worker
pool, the pool numamem RPCs run on. The task takes each component's writer lock in turn
(the memory manager's, held across its checkpoint write, then the metacache's), with a
timeout, and releases it at once: nothing is changed, nothing is written. Then it asks
each component how long its disk write in progress has run (the metacache's group commit
writes with no lock held, and every metacache write waits for it: a hung fsync there
holds no lock the probe could wait for); one running longer than the interval fails the
probe. Last, the task sends one ``Health/Check`` over the socket's path
(:mod:`numamem.api.reach`): the path a client connects to (removed, every new client gets
ENOENT), the accept loop, the interceptors. ``WATCHDOG=1`` is sent only when the task
ran, took every lock, found no such write and was answered over the socket, within the
interval from its submission. For the writes the probe reads one
attribute per component: it takes no other lock and waits for nothing more.

When it did not, no ping is sent (systemd then kills and restarts the daemon once
``WatchdogSec=`` passes without one), and a warning says what is stuck: the pool
(saturated: the probe still waits for a worker, with the RPCs running or queued), a lock
(held: by which component, at least how long), or a probe that finished too late;
with the time since the last ping. The warning is logged when the trouble starts and then
at most once every :data:`WARN_EVERY_S` seconds while it lasts; an info line says when
pings resume. At most one probe is in flight: a stuck one is never joined by more.

Thread-safety: :meth:`Watchdog.tick` runs on the serving loop's thread only; the probe
task runs on a worker and calls ``wake`` (the loop's self-pipe) when it ends, so the
loop pings at once rather than at its next timeout. :meth:`Watchdog.close` (the loop
ends) makes later ``wake`` calls do nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Protocol

from numamem.api.reach import Reach, health_check_over
from numamem.api.sdnotify import Notifier
from numamem.logging import get_logger

_log = get_logger("systemd")

WARN_EVERY_S = 60.0
"""While the daemon stays stuck, one warning per this many seconds."""


class Lock(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


Locks = Callable[[], Sequence[tuple[str, Lock]]]
"""The components' writer locks, by name, looked up at each probe (a component may replace
its manager or cache at load)."""

Writes = Callable[[], Sequence[tuple[str, Callable[[], float]]]]
"""The components' disk writes that run outside their writer lock, by name: each callable
says how many seconds the write in progress has run (0.0: none), without a lock."""


@dataclass
class Probe:
    """One probe task's progress (written by the worker, read by the serving loop)."""

    submitted: float
    started: float | None = None
    waiting_for: str = ""
    """The lock the task waits for now ("" once it took them all)."""
    waiting_since: float = 0.0
    failed: str = ""
    """Why the task gave up (a lock not taken in time, a pool that is shut down)."""
    stalled: str = ""
    """A disk write found running longer than the interval, in words ("" when none)."""
    unreached: str = ""
    """Why the Health/Check over the socket failed, in words ("" when it was answered)."""
    finished: float | None = None
    """When the task ended (took every lock, or gave up)."""
    done: threading.Event = field(default_factory=threading.Event)
    counted: bool = False
    """Counted in :attr:`Watchdog.failures` already."""

    def succeeded_within(self, interval: float) -> bool:
        return (
            not self.failed
            and not self.stalled
            and not self.unreached
            and self.finished is not None
            and self.finished - self.submitted <= interval
        )


class Watchdog:
    """See the module docstring."""

    def __init__(
        self,
        ping: Callable[[], None],
        interval: float,
        submit: Callable[[Callable[[], None]], object],
        locks: Locks,
        wake: Callable[[], None],
        *,
        writes: Writes = lambda: (),
        reach: Reach = lambda timeout: "",
        pool_state: Callable[[], str] = lambda: "",
        clock: Callable[[], float] = time.monotonic,
        warn_every: float = WARN_EVERY_S,
    ) -> None:
        self._ping = ping
        self.interval = interval
        self._submit = submit
        self._locks = locks
        self._wake = wake
        self._writes = writes
        self._reach = reach
        self._pool_state = pool_state
        self._clock = clock
        self._warn_every = warn_every
        self._probe: Probe | None = None
        self._next = clock()
        self._last_ping = clock()
        self._stuck_since: float | None = None
        self._warned_at: float | None = None
        self._closed = False
        self._wake_lock = threading.Lock()
        self.pings = 0
        """``WATCHDOG=1`` sent."""
        self.failures = 0
        """Probes that did not succeed within the interval (each counted once)."""
        self.stuck_ticks = 0
        """Times the loop woke to find no probe succeeding in time (so no ping)."""

    def tick(self) -> float:
        """The serving loop woke (its timeout, or a probe ended): ping if the probe in flight
        succeeded in time, start the next one when due. Returns the seconds until the loop
        should call again (a probe that ends wakes it earlier)."""
        now = self._clock()
        probe = self._probe
        if probe is not None:
            if probe.done.is_set():
                self._probe = None
                if probe.succeeded_within(self.interval):
                    self._succeeded(now)
                else:
                    self._stuck(probe, now)
            elif now - probe.submitted >= self.interval:
                self._stuck(probe, now)
                return self.interval
            else:
                return probe.submitted + self.interval - now
        if now < self._next:
            return self._next - now
        self._probe = probe = Probe(submitted=now)
        self._next = now + self.interval
        try:
            self._submit(lambda: self._run(probe))
        except RuntimeError as err:  # the pool is shut down
            probe.failed = f"the worker pool does not take tasks ({err})"
            probe.done.set()
            return 0.0
        return self.interval

    def close(self) -> None:
        """No ``wake`` after this returns (the loop's pipe may be closed next)."""
        with self._wake_lock:
            self._closed = True

    def _run(self, probe: Probe) -> None:
        """The probe task, on a worker: take and release each writer lock in time, then
        look for a disk write running too long."""
        probe.started = self._clock()
        try:
            for name, lock in self._locks():
                probe.waiting_for, probe.waiting_since = name, self._clock()
                remaining = probe.submitted + self.interval - probe.waiting_since
                if remaining <= 0 or not lock.acquire(timeout=remaining):
                    probe.failed = f"the {name} writer lock"
                    return
                lock.release()
            probe.waiting_for = ""
            for name, running_for in self._writes():
                seconds = running_for()
                if seconds > self.interval:
                    probe.stalled = (
                        f"the {name} disk write has run for {seconds:.1f} s, more than the "
                        f"{self.interval:g} s between pings: every {name} write waits for it"
                    )
                    return
            probe.unreached = self._reach(probe.submitted + self.interval - self._clock())
        finally:
            probe.finished = self._clock()
            probe.done.set()
            with self._wake_lock:
                if not self._closed:
                    self._wake()

    def _succeeded(self, now: float) -> None:
        self._ping()
        self.pings += 1
        if self._stuck_since is not None:
            _log.info(
                "liveness probe succeeded again: pinging the watchdog",
                stuck_seconds=round(now - self._stuck_since, 1),
            )
        self._last_ping = now
        self._stuck_since = self._warned_at = None

    def _stuck(self, probe: Probe, now: float) -> None:
        """No ping for ``probe``: log what is stuck (when it starts, then rate-limited)."""
        self.stuck_ticks += 1
        if not probe.counted:
            probe.counted = True
            self.failures += 1
        if self._stuck_since is None:
            self._stuck_since = now
        if self._warned_at is not None and now - self._warned_at < self._warn_every:
            return
        self._warned_at = now
        _log.warning(
            "liveness probe failed: not pinging the watchdog (systemd restarts numamem once "
            "WatchdogSec passes without a ping)",
            stuck=describe(probe, now, self.interval, self._pool_state()),
            seconds_since_last_ping=round(now - self._last_ping, 1),
            logged_at_most_every_seconds=self._warn_every,
        )


def describe(probe: Probe, now: float, interval: float, pool_state: str) -> str:
    """What held ``probe`` back, in words."""
    pool = f" ({pool_state})" if pool_state else ""
    if probe.stalled:
        return probe.stalled
    if probe.unreached:
        return probe.unreached
    if probe.failed.startswith("the worker pool"):
        return probe.failed
    if probe.started is None:
        return (
            f"the RPC worker pool is saturated: the probe has waited {now - probe.submitted:.1f} s "
            f"for a worker{pool}"
        )
    if probe.failed:
        waited = (probe.finished or now) - probe.waiting_since
        if probe.waiting_since - probe.submitted >= interval:
            return (
                f"the RPC worker pool was saturated: the probe waited "
                f"{probe.started - probe.submitted:.1f} s for a worker{pool}"
            )
        return f"{probe.failed} is held: the probe waited {max(waited, 0.0):.1f} s for it, in vain"
    if probe.waiting_for and not probe.done.is_set():
        return (
            f"the {probe.waiting_for} writer lock is held: the probe has waited "
            f"{now - probe.waiting_since:.1f} s for it"
        )
    took = (probe.finished or now) - probe.submitted
    return f"the probe took {took:.1f} s, more than the {interval:g} s between pings{pool}"


def serving_loop_watchdog(
    notifier: Notifier,
    pool: futures.ThreadPoolExecutor,
    workers: int,
    in_flight: Callable[[], int],
    components: Callable[[], Sequence[object]],
    wake_fd: int,
    socket_path: str,
) -> Watchdog | None:
    """The daemon's watchdog: pings through ``notifier`` (None without ``WatchdogSec=``),
    probes on ``pool`` (the RPC pool of ``workers`` threads, as the warning says; the probe
    is not counted as an RPC) with the writer locks of every component that has
    ``liveness_locks()`` and the disk writes of every component that has
    ``liveness_writes()``, then a Health/Check over ``socket_path`` (the daemon's
    ``--socket``), wakes the loop through the non-blocking ``wake_fd``."""
    interval = notifier.watchdog_interval
    if interval is None:
        return None

    def locks() -> list[tuple[str, Lock]]:
        found = (getattr(c, "liveness_locks", None) for c in components())
        return [pair for get in found if get is not None for pair in get()]

    def writes() -> list[tuple[str, Callable[[], float]]]:
        found = (getattr(c, "liveness_writes", None) for c in components())
        return [pair for get in found if get is not None for pair in get()]

    def wake() -> None:
        with contextlib.suppress(OSError):
            os.write(wake_fd, b"w")

    return Watchdog(
        notifier.watchdog,
        interval,
        lambda task: futures.ThreadPoolExecutor.submit(pool, task),
        locks,
        wake,
        writes=writes,
        reach=health_check_over(socket_path),
        pool_state=lambda: f"{in_flight()} RPCs running or queued on {workers} workers",
    )
