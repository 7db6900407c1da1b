"""How much searching one request may do, and until when.

The hint searches and the merge take a :class:`Work` and charge it as they go:
one *step* is one unit of their inner loops (a pairwise AND of two masks, one
entry of a zeta or Möbius transform, one node of a depth-first search, one
candidate scored by a bound), each a fraction of a microsecond. Past
``limit`` steps the search stops with :class:`~numamem.errors.SearchBudgetError`
(RESOURCE_EXHAUSTED, reason ``SEARCH_BUDGET_EXCEEDED``) naming the budget and
the input being searched (:meth:`Work.stage`); past ``deadline`` (a
:func:`time.monotonic` instant, the client's gRPC deadline) it stops with
:class:`~numamem.errors.DeadlineExceededError`. Either way the caller drops
what it computed: nothing is half-applied.

Budgets are counted, not timed, so the same input is refused or answered the
same way on every machine; only the deadline reads the clock. Every
:data:`PAUSE_EVERY` steps (about 50 µs of search), in a process with other
threads, a search also pauses for the shortest sleep the system gives
(``time.sleep(0)``, 50-80 µs here): a search holds Python's global lock, and
an RPC's thread needs it a dozen times or more per call; without the pauses
each of those would wait for the interpreter's switch interval, and a
ReleasePod took five times its idle time while a search ran
(``os.sched_yield`` makes it worse: the searching thread gives up the CPU but
takes the lock straight back). The pauses still pay with the daemon's 50 µs switch
interval (``numamem.api.server.GIL_SWITCH_INTERVAL_S``): without them ReleasePod took
2.6-3.7 times its idle p50 while the 40-node prefer-closest pod was admitted in a loop,
with them 1.7-2.4 (three runs each, alternating). A search in a daemon thus takes two to four
times its single-threaded time; the figures the budgets count do not change.
A Work is used by one thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from numamem.errors import DeadlineExceededError, SearchBudgetError

SEARCH_BUDGET = 2_000_000
"""Steps one admission (every container's hints, merge and allocation), one Explain, one
Allocate or one hint listing may take: about 0.1-0.3 s of this search on a 2 GHz core.
Realistic pods take a few hundred to a few tens of thousands (README, Large machines)."""
FIX = (
    "To admit it, make the search smaller: fewer or narrower hints from other providers, "
    "restrict-to-cpu-numa-nodes=true or prefer-closest-numa-nodes=false in "
    "--topology-manager-policy-options, or a larger SEARCH_BUDGET in numamem/work.py"
)
"""What a refusal for the budget tells the operator to do."""
PAUSE_EVERY = 512
"""Steps between two pauses for other threads (and two looks at the deadline)."""


class Work:
    """A step budget and an optional deadline; see the module docstring."""

    __slots__ = ("_clock", "_next_clock", "_pause", "_what", "deadline", "limit", "spent")

    def __init__(
        self,
        limit: int | None = None,
        deadline: float | None = None,
        *,
        pause: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = SEARCH_BUDGET if limit is None else limit
        """The steps allowed (None: :data:`SEARCH_BUDGET`, read when the Work is made)."""
        self.deadline = deadline
        self.spent = 0
        self._what: str | Callable[[], str] = "the search"
        self._clock = clock
        self._pause = pause
        """Whether to pause for other threads (not while holding a lock others wait for)."""
        self._next_clock = PAUSE_EVERY

    def spend(self, steps: int = 1) -> None:
        """Charge ``steps``; raise when the budget or the deadline is past."""
        self.spent += steps
        if self.spent > self.limit:
            raise SearchBudgetError(
                f"{self.what}: the search needs more than {self.limit:,} steps, the search "
                f"budget (SEARCH_BUDGET); refused rather than approximated, nothing changed. "
                f"{FIX} (see README, Large machines)"
            )
        if self.spent >= self._next_clock:
            self._next_clock = self.spent + PAUSE_EVERY
            if self._pause and threading.active_count() > 1:
                time.sleep(0)  # let the other threads run (see the module docstring)
            if self.deadline is not None:
                self.check_deadline()

    @property
    def what(self) -> str:
        """What is being searched, for a refusal's message (see :meth:`stage`)."""
        what = self._what
        return what if isinstance(what, str) else what()

    def check_deadline(self) -> None:
        """Raise DeadlineExceededError when the deadline is past (reads the clock)."""
        if self.deadline is not None and self._clock() >= self.deadline:
            raise DeadlineExceededError(
                f"{self.what}: the client's deadline passed after {self.spent:,} search steps; "
                "nothing was changed"
            )

    def remaining(self) -> int:
        return max(self.limit - self.spent, 0)

    def stage(self, what: str | Callable[[], str]) -> _Stage:
        """Name the input searched inside the block (the refusal's message says it); a
        callable is only called for a refusal. A context manager; on leaving the block,
        however it is left, the outer name is back."""
        return _Stage(self, what)


class _Stage:
    """:meth:`Work.stage`'s context manager (a class: cheaper to enter than a generator's)."""

    __slots__ = ("_outer", "_what", "_work")

    def __init__(self, work: Work, what: str | Callable[[], str]) -> None:
        self._work = work
        self._what = what
        self._outer: str | Callable[[], str] = ""

    def __enter__(self) -> None:
        work = self._work
        self._outer = work._what
        work._what = self._what

    def __exit__(self, *exc: object) -> None:
        self._work._what = self._outer
