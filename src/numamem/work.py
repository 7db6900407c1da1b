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

A search that runs outside every lock (``courteous=True``: an admission's or
an Allocate's computation on its fork, an Explain, a hint listing) also gives
way to the daemon's other calls: at a pause, while another unary RPC is
running, it waits for it (:class:`Courtesy`), for at most
:data:`COURTESY_MAX_WAIT` per pause (give or take one wake-up: a switch interval) and, in
all, for no longer than it has run without waiting (its own time, the time it
waited for the interpreter lock included), so that traffic makes it take at
most about twice what it takes in the daemon without traffic. It never waits
into the time it may still need before its deadline: a wait leaves at least
twice the search's own time so far before the deadline (so a search whose
deadline is tight is not turned into DEADLINE_EXCEEDED by the waits). The lock
then belongs to the short call for the whole of it, not for one switch
interval at a time: while the 40-node
prefer-closest pod was admitted in a loop, ReleasePod took 2.3-2.4 times its
idle p50 with plain pauses and 1.65-1.70 with courteous ones (three runs each),
the admission itself taking 21-25 ms instead of 17 ms over gRPC.
A Work is used by one thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from numamem.errors import DeadlineExceededError, SearchBudgetError

SEARCH_BUDGET = 2_000_000
"""Steps one admission (every container's hints, merge and allocation), one Explain, one
Allocate or one hint listing may take: about 0.1-0.3 s of this search on a 2 GHz core.
Realistic pods take a few hundred to a few tens of thousands (docs/large-machines.md)."""
FIX = (
    "To admit it, make the search smaller: fewer or narrower hints from other providers, "
    "restrict-to-cpu-numa-nodes=true or prefer-closest-numa-nodes=false in "
    "--topology-manager-policy-options, or a larger SEARCH_BUDGET in numamem/work.py"
)
"""What a refusal for the budget tells the operator to do."""
PAUSE_EVERY = 512
"""Steps between two pauses for other threads (and two looks at the deadline)."""
COURTESY_MAX_WAIT = 0.002
"""Seconds a courteous search waits at one pause for the other calls to finish (about one
durable ReleasePod on a disk); see the module docstring."""


class Courtesy:
    """The calls running in this process, for courteous searches to give way to. Thread-safe.

    The API layer brackets each unary RPC with :meth:`begin` and :meth:`end`; a courteous
    search's pause calls :meth:`wait`, which returns once no call runs but searching ones
    (a thread that has waited here counts as searching until its call ends, so that two
    searches do not wait for each other), or after ``timeout``. A call that blocks on
    something outside the daemon (the kubelet's podresources answer) is not counted
    meanwhile (:meth:`idle`). A call that waits for the writer lock or a disk sync is:
    it needs the interpreter lock the moment it is back. One per daemon, installed for
    the process with :func:`install_courtesy` (the interpreter lock it shares out is the
    process's too).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._running = 0
        self._searching = 0
        self._waiting = 0
        self._local = threading.local()

    def begin(self) -> None:
        """A call starts on this thread."""
        self._local.in_call = True
        with self._cond:
            self._running += 1

    def end(self) -> None:
        """The call on this thread ends (however it ended)."""
        local = self._local
        searched = getattr(local, "searching", False)
        local.in_call = local.searching = False
        with self._cond:
            self._running -= 1
            if searched:
                self._searching -= 1
            if self._waiting:
                self._cond.notify_all()

    def others(self) -> int:
        """The calls running that are not searching."""
        return self._running - self._searching

    @contextlib.contextmanager
    def idle(self) -> Iterator[None]:
        """Inside the block, this thread's call is not counted as running (it waits for
        something outside the daemon and needs no interpreter lock). Outside a call, or for
        a searching call, it changes nothing."""
        local = self._local
        if not getattr(local, "in_call", False) or getattr(local, "searching", False):
            yield
            return
        with self._cond:
            self._running -= 1
            if self._waiting:
                self._cond.notify_all()
        local.in_call = False
        try:
            yield
        finally:
            local.in_call = True
            with self._cond:
                self._running += 1

    def wait(self, timeout: float) -> float:
        """Wait until no call but searching ones runs, for at most ``timeout`` seconds;
        return the seconds waited (0.0 at once when none runs)."""
        local = self._local
        with self._cond:
            if getattr(local, "in_call", False) and not getattr(local, "searching", False):
                local.searching = True
                self._searching += 1
                if self._waiting:
                    self._cond.notify_all()  # one call fewer for the others to wait for
            if self._running - self._searching <= 0 or timeout <= 0:
                return 0.0
            began = time.monotonic()
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: self._running - self._searching <= 0, timeout)
            finally:
                self._waiting -= 1
            return time.monotonic() - began


_installed: list[Courtesy] = []
_courtesy: Courtesy | None = None
"""The last of ``_installed`` (None when it is empty), kept so that a pause reads it
without the lock."""
_installed_lock = threading.Lock()


def install_courtesy(courtesy: Courtesy) -> None:
    """Make ``courtesy`` the one courteous searches of this process give way through, until
    :func:`uninstall_courtesy` (then the one installed before it and still installed comes
    back, in whatever order they are uninstalled). Installing one already installed changes
    nothing."""
    global _courtesy
    with _installed_lock:
        if courtesy not in _installed:
            _installed.append(courtesy)
        _courtesy = _installed[-1]


def uninstall_courtesy(courtesy: Courtesy) -> None:
    """Stop ``courtesy`` being installed (nothing when it is not); see :func:`install_courtesy`."""
    global _courtesy
    with _installed_lock:
        if courtesy in _installed:
            _installed.remove(courtesy)
        _courtesy = _installed[-1] if _installed else None


def installed_courtesy() -> Courtesy | None:
    """The :class:`Courtesy` courteous searches give way through now (None: none, the
    pauses only sleep)."""
    return _courtesy


class Work:
    """A step budget and an optional deadline; see the module docstring."""

    __slots__ = (
        "_began",
        "_clock",
        "_courteous",
        "_next_clock",
        "_pause",
        "_waited",
        "_what",
        "deadline",
        "limit",
        "spent",
    )

    def __init__(
        self,
        limit: int | None = None,
        deadline: float | None = None,
        *,
        pause: bool = True,
        courteous: bool = False,
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
        self._courteous = courteous and pause
        """Whether a pause waits for the other calls (:class:`Courtesy`): only a search
        that holds no lock at all."""
        self._began = clock() if self._courteous else 0.0
        self._waited = 0.0
        self._next_clock = PAUSE_EVERY

    def spend(self, steps: int = 1) -> None:
        """Charge ``steps``; raise when the budget or the deadline is past."""
        self.spent += steps
        if self.spent > self.limit:
            raise SearchBudgetError(
                f"{self.what}: the search needs more than {self.limit:,} steps, the search "
                f"budget (SEARCH_BUDGET); refused rather than approximated, nothing changed. "
                f"{FIX} (see docs/large-machines.md in the numamem source)"
            )
        if self.spent >= self._next_clock:
            self._next_clock = self.spent + PAUSE_EVERY
            if self._pause and threading.active_count() > 1:
                courtesy = _courtesy
                if self._courteous and courtesy is not None and courtesy.others() > 0:
                    self._give_way(courtesy)
                else:
                    time.sleep(0)  # let the other threads run (see the module docstring)
            if self.deadline is not None:
                self.check_deadline()

    def _give_way(self, courtesy: Courtesy) -> None:
        """Wait for the other calls: per pause at most COURTESY_MAX_WAIT, in all at most the
        time searched, and never so long that less than twice the time searched is left
        before the deadline."""
        now = self._clock()
        searched = (now - self._began) - self._waited
        timeout = min(COURTESY_MAX_WAIT, searched - self._waited)
        if self.deadline is not None:
            timeout = min(timeout, (self.deadline - now) - 2 * searched)
        waited = courtesy.wait(max(timeout, 0.0))  # marks this call searching, at least
        self._waited += waited
        if not waited:
            time.sleep(0)  # nothing to wait for (or no time left): the plain pause

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
