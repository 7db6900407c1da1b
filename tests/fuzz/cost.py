"""The fuzzer's cost oracle (issue 38): what one request may cost the daemon.

Every request the campaign sends is charged what the daemon process spent while it
was answered: its CPU time (user + system, every thread) and the growth of its RSS,
both read with psutil from ``/proc`` just after the reply (the reading after the
previous request is the one before: nothing else talks to the daemon in between;
checks and restarts call :meth:`CostOracle.mark`). Each must stay under an affine
bound in the request's size (its serialized bytes, or the undecodable payload's):

* CPU: :data:`CPU_FIXED_S` + :data:`CPU_PER_BYTE_S` per byte;
* RSS growth: :data:`RSS_FIXED_BYTES` + :data:`RSS_PER_BYTE` per byte.

The fixed parts absorb what no request causes but one is charged with: a collector
round, a journal compaction, a garbage collection over the whole heap, the kernel's
10 ms CPU accounting tick; the per-byte parts are what decoding, validating and
storing a request may cost per byte. Issue 38's request (20 keys of ``0-1048576``,
309 bytes) cost 9.5 s and 1.3 GiB: 38 times the CPU bound and 40 times the RSS bound;
one such key costs about 0.5 s.

A restart must serve within its usual time: the daemon's CPU time from its start to
SERVING is at most :data:`RESTART_FACTOR` times the campaign's first start (the
floor, on an empty state directory) plus :data:`RESTART_SLACK_S`. CPU time, not wall
time, so that other processes on the machine do not move the bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

CPU_FIXED_S = 0.25
"""CPU seconds any request may cost beside its bytes (see the module docstring)."""
CPU_PER_BYTE_S = 2e-6
"""CPU seconds per request byte: 2 µs, 8 s for the largest request (4 MiB)."""
RSS_FIXED_BYTES = 32 * 2**20
"""RSS growth any request may cause beside its bytes."""
RSS_PER_BYTE = 16
"""RSS growth per request byte: what storing it may take (Python objects, the journal's
texts of the entry)."""
RESTART_FACTOR = 3.0
RESTART_SLACK_S = 1.0
"""A restart's CPU time to SERVING is at most RESTART_FACTOR * floor + RESTART_SLACK_S."""

Sample = tuple[float, int]
"""CPU seconds (user + system) and RSS bytes of the daemon."""


@dataclass(frozen=True)
class Bound:
    """``fixed + per_byte * size``."""

    fixed: float
    per_byte: float

    def of(self, size: int) -> float:
        return self.fixed + self.per_byte * size


CPU = Bound(CPU_FIXED_S, CPU_PER_BYTE_S)
RSS = Bound(RSS_FIXED_BYTES, RSS_PER_BYTE)


@dataclass
class Worst:
    """The request that used the largest share of its bound."""

    share: float = 0.0
    cost: float = 0.0
    size: int = 0
    what: str = ""


def psutil_sampler(pid: int) -> Callable[[], Sample]:
    process = psutil.Process(pid)

    def sample() -> Sample:
        times = process.cpu_times()
        return times.user + times.system, process.memory_info().rss

    return sample


@dataclass
class CostOracle:
    """Charges each request its cost; returns findings beyond the bounds, keeps the worst."""

    cpu: Bound = CPU
    rss: Bound = RSS
    sampler: Callable[[int], Callable[[], Sample]] = psutil_sampler
    """pid -> a function sampling that process (tests pass a fake)."""
    worst_cpu: Worst = field(default_factory=Worst)
    worst_rss: Worst = field(default_factory=Worst)
    floor_s: float | None = None
    """CPU seconds of the first start, to SERVING."""
    restarts_s: list[float] = field(default_factory=list)
    charged: int = 0
    _sample: Callable[[], Sample] | None = None
    _last: Sample = (0.0, 0)

    def started(self, pid: int) -> list[str]:
        """The daemon ``pid`` serves (just now): the first start is the floor, a later one
        is checked against it. Returns the findings."""
        self._sample = self.sampler(pid)
        self._last = self._sample()
        spent = self._last[0]
        if self.floor_s is None:
            self.floor_s = spent
            return []
        self.restarts_s.append(spent)
        limit = RESTART_FACTOR * self.floor_s + RESTART_SLACK_S
        if spent <= limit:
            return []
        return [
            f"the restart took {spent:.2f} s of CPU to serve, more than {RESTART_FACTOR:g} x "
            f"the first start's {self.floor_s:.2f} s + {RESTART_SLACK_S:g} s = {limit:.2f} s"
        ]

    def mark(self) -> None:
        """Start charging from now (after requests that are not the campaign's)."""
        if self._sample is not None:
            try:
                self._last = self._sample()
            except psutil.Error:
                return

    def charge(self, size: int, what: str) -> list[str]:
        """Charge the request just answered (``size`` bytes, ``what`` for reports)."""
        if self._sample is None:
            return []
        try:
            now = self._sample()
        except psutil.Error:  # the daemon died: the campaign reports that
            return []
        spent, grown = now[0] - self._last[0], max(0, now[1] - self._last[1])
        self._last = now
        self.charged += 1
        problems = []
        for name, cost, bound, worst, shown in (
            ("CPU", spent, self.cpu, self.worst_cpu, f"{spent * 1000:.0f} ms"),
            ("RSS growth", grown, self.rss, self.worst_rss, f"{grown / 2**20:.1f} MiB"),
        ):
            limit = bound.of(size)
            share = cost / limit
            if share > worst.share:
                worst.share, worst.cost, worst.size, worst.what = share, cost, size, what
            if cost > limit:
                problems.append(
                    f"cost the daemon {shown} of {name} for {size} bytes, {share:.1f} x the "
                    f"bound ({bound.fixed:g} + {bound.per_byte:g} per byte)"
                )
        return problems

    def report(self) -> str:
        """One line: the worst shares seen and the restarts' CPU beside the floor."""
        c, r = self.worst_cpu, self.worst_rss
        restarts = ", ".join(f"{s:.2f}" for s in self.restarts_s) or "none"
        return (
            f"cost over {self.charged} requests: worst CPU {c.share:.3f} of its bound "
            f"({c.cost * 1000:.0f} ms for {c.size} bytes: {c.what}); worst RSS growth "
            f"{r.share:.3f} of its bound ({r.cost / 2**20:.1f} MiB for {r.size} bytes: {r.what}); "
            f"CPU to serve: first start {self.floor_s or 0:.2f} s, restarts {restarts} s"
        )
