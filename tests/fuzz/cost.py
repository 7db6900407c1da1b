"""The fuzzer's cost oracle (issue 38): what one request may cost the daemon.

Every request the campaign sends is charged what the daemon process spent while it
was answered: its CPU time (user + system, every thread) and its peak memory, the
growth of its resident set at its highest (``VmHWM`` in ``/proc/<pid>/status``) over its
resident set before the request. Each reading resets the peak (``5`` written to
``/proc/<pid>/clear_refs``, Linux 4.0+), so the next request is charged its own peak:
memory a request allocates and frees before its reply is charged too (issue 38's second
review: a 4 MiB cpulist of short tokens peaked at +163 MiB while the RSS after the reply
grew 21 MiB). The reading after the previous request is the one before: nothing else
talks to the daemon in between; checks and restarts call :meth:`CostOracle.mark`. Where
the peak cannot be reset (no ``clear_refs``), the RSS after the reply is charged instead
and the report says so. Each must stay under an affine bound in the request's size (its
serialized bytes, or the undecodable payload's):

* CPU: :data:`CPU_FIXED_S` + :data:`CPU_PER_BYTE_S` per byte, and for an RPC that searches
  hints (:data:`SEARCHING`) :data:`CPU_SEARCH_S` more: the search is bounded by its budget
  of counted steps (``numamem.work.SEARCH_BUDGET``), not by its bytes;
* peak memory growth: :data:`RSS_FIXED_BYTES` + :data:`RSS_PER_BYTE` per byte, and for a
  searching RPC :data:`RSS_SEARCH_BYTES` more.

The fixed parts absorb what no request causes but one is charged with: a collector
round, a journal compaction, a garbage collection over the whole heap, the kernel's
10 ms CPU accounting tick; the per-byte parts are what decoding, validating and
storing a request may cost per byte. Issue 38's request (20 keys of ``0-1048576``,
309 bytes) cost 9.5 s and 1.3 GiB: 38 times the CPU bound and 40 times the RSS bound;
one such key costs about 0.5 s.

What the campaign covers: on the standard 2-node fake machine no search comes near its
budget; on the large one (``--machine large``, tests/fuzz/machines.py: 40 nodes,
prefer-closest) the campaign also sends short requests that spend the whole budget, so
the allowances :data:`CPU_SEARCH_S` and :data:`RSS_SEARCH_BYTES` are charged
(tests/e2e/test_fuzz_cost.py runs it; ``make soak`` too).

A restart must serve within its usual time: the daemon's CPU time from its start to
SERVING is at most :data:`RESTART_FACTOR` times the campaign's first start (the
floor, on an empty state directory) plus :data:`RESTART_SLACK_S`. CPU time, not wall
time, so that other processes on the machine do not move the bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

CPU_FIXED_S = 0.25
"""CPU seconds any request may cost beside its bytes (see the module docstring)."""
CPU_PER_BYTE_S = 2e-6
"""CPU seconds per request byte: 2 µs, 8 s for the largest request (4 MiB)."""
CPU_SEARCH_S = 2.0
"""CPU seconds a hint search may add (:data:`SEARCHING`): on the large machine
(tests/fuzz/machines.py) a short request that spends the whole ``SEARCH_BUDGET``
(2,000,000 steps) cost the daemon 0.41-0.45 s for Admit and 1.07-1.12 s for
GetPodTopologyHints (``python -m tests.fuzz --machine large --requests 0``, seeds 1 and
2); with :data:`CPU_FIXED_S`, twice the worst measured, room for a slower core."""
SEARCHING = frozenset(
    f"MemoryManager/{name}"
    for name in (
        "Admit",
        "Allocate",
        "AllocatePod",
        "Explain",
        "ExplainResize",
        "GetPodTopologyHints",
        "GetTopologyHints",
        "Resize",
    )
)
"""The RPCs that search hints under ``numamem.work.SEARCH_BUDGET``."""
RSS_FIXED_BYTES = 32 * 2**20
"""Peak memory growth any request may cause beside its bytes."""
RSS_SEARCH_BYTES = 64 * 2**20
"""Peak memory growth a hint search may add (:data:`SEARCHING`): GetPodTopologyHints
spending the whole budget on the large machine peaked at +41.5 MiB (the command of
:data:`CPU_SEARCH_S`); about 1.5 times that."""
RSS_PER_BYTE = 16
"""Peak memory growth per request byte: what decoding, converting and storing it may take
(protobuf's own objects, Python objects, the journal's texts of the entry)."""
RESTART_FACTOR = 3.0
RESTART_SLACK_S = 1.0
"""A restart's CPU time to SERVING is at most RESTART_FACTOR * floor + RESTART_SLACK_S."""

Sample = tuple[float, int, int]
"""CPU seconds (user + system), RSS bytes and peak RSS bytes since the previous sample."""


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


def resets_peak(pid: int) -> bool:
    """Whether ``pid``'s peak RSS can be reset (``clear_refs`` takes ``5``): resets it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def proc_sampler(pid: int) -> Callable[[], Sample]:
    """Samples ``pid`` and resets its peak (when it can: else the peak is the RSS)."""
    process = psutil.Process(pid)
    status = Path(f"/proc/{pid}/status")
    resets = resets_peak(pid)

    def sample() -> Sample:
        times = process.cpu_times()
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
        except OSError as err:
            raise psutil.NoSuchProcess(pid) from err
        rss = int(fields["VmRSS"].split()[0]) * 1024
        peak = int(fields["VmHWM"].split()[0]) * 1024 if resets else rss
        if resets:
            with contextlib.suppress(OSError):
                Path(f"/proc/{pid}/clear_refs").write_text("5")
        return times.user + times.system, rss, max(peak, rss)

    return sample


@dataclass
class CostOracle:
    """Charges each request its cost; returns findings beyond the bounds, keeps the worst."""

    cpu: Bound = CPU
    search_s: float = CPU_SEARCH_S
    """What a searching RPC (:data:`SEARCHING`) may spend beside :attr:`cpu`."""
    rss: Bound = RSS
    rss_search: float = RSS_SEARCH_BYTES
    """What a searching RPC may grow the peak beside :attr:`rss`."""
    sampler: Callable[[int], Callable[[], Sample]] = proc_sampler
    """pid -> a function sampling that process and resetting its peak (tests pass a fake)."""
    worst_cpu: Worst = field(default_factory=Worst)
    worst_rss: Worst = field(default_factory=Worst)
    floor_s: float | None = None
    """CPU seconds of the first start, to SERVING."""
    restarts_s: list[float] = field(default_factory=list)
    charged: int = 0
    peak_reset: bool = True
    """Whether the daemon's peak could be reset (else the RSS after a reply is charged)."""
    _sample: Callable[[], Sample] | None = None
    _last: Sample = (0.0, 0, 0)

    def started(self, pid: int) -> list[str]:
        """The daemon ``pid`` serves (just now): the first start is the floor, a later one
        is checked against it. Returns the findings."""
        if self.sampler is proc_sampler:
            self.peak_reset = resets_peak(pid)
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

    def charge(self, size: int, what: str, rpc: str = "") -> list[str]:
        """Charge the request just answered (``size`` bytes, ``what`` for reports, ``rpc``
        as ``Service/Method``: a searching one has :data:`CPU_SEARCH_S` more)."""
        if self._sample is None:
            return []
        try:
            now = self._sample()
        except psutil.Error:  # the daemon died: the campaign reports that
            return []
        spent, grown = now[0] - self._last[0], max(0, now[2] - self._last[1])
        self._last = now
        self.charged += 1
        problems = []
        cpu, rss = self.cpu_bound(rpc), self.rss_bound(rpc)
        for name, cost, bound, worst, shown in (
            ("CPU", spent, cpu, self.worst_cpu, f"{spent * 1000:.0f} ms"),
            ("peak RSS growth", grown, rss, self.worst_rss, f"{grown / 2**20:.1f} MiB"),
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

    def cpu_bound(self, rpc: str) -> Bound:
        """The CPU bound of ``rpc`` (``Service/Method[@socket]``, as tests/fuzz/catalogue.py
        names it): :attr:`cpu`, and :attr:`search_s` more for a searching one."""
        if rpc.split("@", 1)[0] in SEARCHING:
            return Bound(self.cpu.fixed + self.search_s, self.cpu.per_byte)
        return self.cpu

    def rss_bound(self, rpc: str) -> Bound:
        """The peak memory bound of ``rpc``: :attr:`rss`, :attr:`rss_search` more for a
        searching one."""
        if rpc.split("@", 1)[0] in SEARCHING:
            return Bound(self.rss.fixed + self.rss_search, self.rss.per_byte)
        return self.rss

    def report(self) -> str:
        """One line: the worst shares seen and the restarts' CPU beside the floor."""
        c, r = self.worst_cpu, self.worst_rss
        restarts = ", ".join(f"{s:.2f}" for s in self.restarts_s) or "none"
        return (
            f"cost over {self.charged} requests: worst CPU {c.share:.3f} of its bound "
            f"({c.cost * 1000:.0f} ms for {c.size} bytes: {c.what}); worst "
            f"{'peak RSS growth' if self.peak_reset else 'RSS growth (no peak: clear_refs)'} "
            f"{r.share:.3f} of its bound ({r.cost / 2**20:.1f} MiB for {r.size} bytes: {r.what}); "
            f"CPU to serve: first start {self.floor_s or 0:.2f} s, restarts {restarts} s"
        )
