"""A search gives way to the daemon's other calls (numamem.work.Courtesy): the counting, the
waits and their bounds, the interceptor's brackets, the daemon's installation, and an
admission that still gives the kubelet's answer while a call never ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from numamem import work as work_module
from numamem.api.app import build_components
from numamem.api.interceptors import ServerInterceptor
from numamem.api.memorymanager import MemoryManagerServicer
from numamem.api.podresources import PodResourcesServicer
from numamem.api.server import Daemon
from numamem.errors import DeadlineExceededError, NotFoundError, StartupError
from numamem.testing.server import default_config, serve_in_process
from numamem.topologymanager.admission import GivenHints
from numamem.topologymanager.policy import TopologyHint
from numamem.work import (
    COURTESY_MAX_WAIT,
    PAUSE_EVERY,
    Courtesy,
    Work,
    install_courtesy,
    uninstall_courtesy,
)
from tests.unit.test_admission_bounds import cluster_distance, guaranteed, machine, manager, mask

WAIT = 5.0
"""A timeout no wait below should reach: reaching it means the wait missed its wake-up."""


def _until(condition: Any, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.001)


def _in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        out["value"] = target()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# --- Courtesy ----------------------------------------------------------------------------


def test_a_wait_with_no_call_running_returns_at_once() -> None:
    c = Courtesy()
    assert c.others() == 0
    assert c.wait(WAIT) == 0.0


def test_a_search_waits_until_the_other_call_ends() -> None:
    c = Courtesy()
    c.begin()  # the other call, on this thread
    assert c.others() == 1
    thread, out = _in_thread(lambda: c.wait(WAIT))  # a search outside any call
    _until(lambda: c._waiting == 1)
    assert thread.is_alive(), "it waits while the call runs"
    c.end()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert 0.0 < out["value"] < WAIT
    assert c.others() == 0


def test_a_wait_ends_at_its_timeout_when_the_call_does_not() -> None:
    c = Courtesy()
    c.begin()  # the other call, on this thread; the search waits on another
    thread, out = _in_thread(lambda: c.wait(0.02))
    thread.join(WAIT)
    assert not thread.is_alive()
    assert 0.02 <= out["value"] < WAIT
    assert c._waiting == 0
    c.end()


def test_searching_calls_do_not_wait_for_each_other() -> None:
    """Two calls that both search: each counts as searching once it waits, so neither waits
    for the other (the first is woken when the second starts to search)."""
    c = Courtesy()
    entered = threading.Barrier(2)

    def search() -> float:
        c.begin()
        entered.wait(WAIT)
        try:
            return c.wait(WAIT)
        finally:
            c.end()

    threads = [_in_thread(search) for _ in range(2)]
    for thread, _ in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert all(out["value"] < WAIT for _, out in threads)
    assert (c._running, c._searching, c._waiting) == (0, 0, 0)


def test_a_call_that_searched_stops_counting_when_it_ends() -> None:
    c = Courtesy()
    c.begin()
    assert c.wait(WAIT) == 0.0  # only itself runs: marked searching, no wait
    assert (c._running, c._searching, c.others()) == (1, 1, 0)
    c.end()
    assert (c._running, c._searching, c.others()) == (0, 0, 0)
    c.begin()  # the thread's next call is not searching until it waits again
    assert c.others() == 1
    c.end()


# --- Work: when and how long a search gives way ----------------------------------------------


class FakeCourtesy(Courtesy):
    """Another call always runs; each wait "takes" its whole timeout on the fake clock."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock
        self.timeouts: list[float] = []
        self.at: list[float] = []
        """The clock at each wait."""

    def others(self) -> int:
        return 1

    def wait(self, timeout: float) -> float:
        self.timeouts.append(timeout)
        self.at.append(self.clock[0])
        self.clock[0] += timeout
        return timeout


@pytest.fixture
def other_thread() -> Iterator[None]:
    """A second thread, without which a search does not pause at all."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.fixture
def fake() -> Iterator[tuple[FakeCourtesy, list[float]]]:
    clock = [100.0]
    courtesy = FakeCourtesy(clock)
    install_courtesy(courtesy)
    yield courtesy, clock
    uninstall_courtesy(courtesy)


def _search(w: Work, clock: list[float], pauses: int, step_seconds: float) -> None:
    """``pauses`` pauses' worth of steps, each step taking ``step_seconds`` of the clock."""
    for _ in range(pauses * PAUSE_EVERY):
        clock[0] += step_seconds
        w.spend()


def test_a_courteous_search_waits_no_longer_than_it_searched(
    other_thread: None, fake: tuple[FakeCourtesy, list[float]]
) -> None:
    courtesy, clock = fake
    w = Work(courteous=True, clock=lambda: clock[0])
    _search(w, clock, pauses=200, step_seconds=1e-7)  # 51 µs of search per pause
    searched = 200 * PAUSE_EVERY * 1e-7
    assert any(courtesy.timeouts), "it gave way"
    assert all(0 <= t <= COURTESY_MAX_WAIT for t in courtesy.timeouts)
    waited = sum(courtesy.timeouts)  # the fake waits each timeout in full
    assert waited <= searched * (1 + 1e-9)
    assert waited >= searched * 0.9, "and gave way about as long as allowed"


def test_a_long_search_waits_at_most_the_cap_per_pause(
    other_thread: None, fake: tuple[FakeCourtesy, list[float]]
) -> None:
    courtesy, clock = fake
    w = Work(courteous=True, clock=lambda: clock[0])
    _search(w, clock, pauses=20, step_seconds=1e-5)  # 5 ms of search per pause
    assert max(courtesy.timeouts) == COURTESY_MAX_WAIT


def test_a_courteous_wait_leaves_twice_the_search_before_the_deadline(
    other_thread: None, fake: tuple[FakeCourtesy, list[float]]
) -> None:
    """Each wait ends with at least twice the search's own time so far left before the
    deadline: a search that fits its deadline is not made to miss it by giving way (it
    waits less and less as the deadline nears, and not at all once it could not double)."""
    courtesy, clock = fake
    began, deadline = clock[0], clock[0] + 0.05
    w = Work(deadline=deadline, courteous=True, clock=lambda: clock[0])
    _search(w, clock, pauses=60, step_seconds=5e-7)  # 15 ms of search: fits the 50 ms
    waited = 0.0
    for t, at in zip(courtesy.timeouts, courtesy.at, strict=True):
        searched = (at - began) - waited
        assert t == 0 or t <= (deadline - at) - 2 * searched + 1e-12  # 0: no wait (marks only)
        waited += t
    assert waited > 0.005, "it did give way while there was room"
    assert clock[0] < deadline, "and the search ended in time"
    # Each wait is the largest allowed: the cap, the total allowance or the deadline's room.
    waited = 0.0
    for t, at in zip(courtesy.timeouts, courtesy.at, strict=True):
        searched = (at - began) - waited
        room = min(COURTESY_MAX_WAIT, searched - waited, (deadline - at) - 2 * searched)
        assert t == pytest.approx(max(room, 0.0), abs=1e-12)
        waited += t


def test_a_search_past_its_deadline_stops_there(
    other_thread: None, fake: tuple[FakeCourtesy, list[float]]
) -> None:
    courtesy, clock = fake
    deadline = clock[0] + 0.05
    w = Work(deadline=deadline, courteous=True, clock=lambda: clock[0])
    with pytest.raises(DeadlineExceededError):
        _search(w, clock, pauses=10_000, step_seconds=1e-6)
    waits = [(t, at) for t, at in zip(courtesy.timeouts, courtesy.at, strict=True) if t > 0]
    assert waits
    assert all(t <= deadline - at for t, at in waits)
    assert clock[0] <= deadline + PAUSE_EVERY * 1e-6 * 1.01, "stopped at the deadline"


@pytest.mark.parametrize(
    "kwargs", [{"courteous": False}, {"courteous": True, "pause": False}], ids=["plain", "locked"]
)
def test_only_a_courteous_pausing_search_gives_way(
    kwargs: dict[str, bool], other_thread: None, fake: tuple[FakeCourtesy, list[float]]
) -> None:
    """A search that may hold a lock (not courteous) or holds one (no pauses) never waits
    for the other calls: they could be waiting for it."""
    courtesy, clock = fake
    w = Work(clock=lambda: clock[0], **kwargs)
    _search(w, clock, pauses=20, step_seconds=1e-6)
    assert courtesy.timeouts == []


# --- the interceptor and the daemon ---------------------------------------------------------


class _Context:
    def time_remaining(self) -> float:
        return 30.0

    def code(self) -> grpc.StatusCode | None:
        return None

    def abort_with_status(self, status: Any) -> None:
        raise grpc.RpcError(status.details)

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "raises"])
def test_the_interceptor_counts_a_unary_call_while_its_handler_runs(fails: bool) -> None:
    c = Courtesy()
    seen: list[int] = []

    def handler(request: Any, context: Any) -> str:
        seen.append(c.others())
        if fails:
            raise NotFoundError("pod.uid 'x': not found")
        return "reply"

    wrapped = ServerInterceptor(None, courtesy=c)._wrap_unary(
        handler, "/m", "id", False, True, counted=True
    )
    try:
        wrapped(object(), _Context())
    except grpc.RpcError:
        assert fails
    assert seen == [1]
    assert c.others() == 0


class _Details:
    method = "/numamem.v1.Test/Call"
    invocation_metadata = ()


def test_the_interceptor_counts_unary_calls_only() -> None:
    """Through ``intercept_service`` as grpcio calls it: a unary-unary handler is counted
    while it runs; server streams and client streams (which live as long as their client)
    are not."""
    c = Courtesy()
    seen: dict[str, int] = {}

    def unary(request: Any, context: Any) -> str:
        seen["unary"] = c.others()
        return "reply"

    def server_stream(request: Any, context: Any) -> Iterator[str]:
        seen["server stream"] = c.others()
        yield "reply"

    def client_stream(requests: Iterator[Any], context: Any) -> str:
        seen["client stream"] = c.others()
        return "reply"

    interceptor = ServerInterceptor(None, courtesy=c)

    def intercepted(handler: Any) -> Any:
        return interceptor.intercept_service(lambda _details: handler, cast(Any, _Details()))

    intercepted(grpc.unary_unary_rpc_method_handler(unary)).unary_unary(object(), _Context())
    list(
        intercepted(grpc.unary_stream_rpc_method_handler(server_stream)).unary_stream(
            object(), _Context()
        )
    )
    intercepted(grpc.stream_unary_rpc_method_handler(client_stream)).stream_unary(
        iter([object()]), _Context()
    )
    assert seen == {"unary": 1, "server stream": 0, "client stream": 0}
    assert c.others() == 0


def test_a_call_waiting_outside_the_daemon_is_not_counted() -> None:
    c = Courtesy()
    c.begin()
    assert c.others() == 1
    with c.idle():
        assert c.others() == 0
        thread, out = _in_thread(lambda: c.wait(WAIT))  # a search does not wait for it
        thread.join(WAIT)
        assert out["value"] == 0.0
    assert c.others() == 1
    c.end()
    assert (c._running, c._searching) == (0, 0)
    with c.idle():  # outside a call: nothing to uncount
        assert c.others() == 0
    assert c._running == 0


def test_after_an_idle_block_the_call_counts_and_can_search() -> None:
    c = Courtesy()
    c.begin()
    with c.idle():
        pass
    assert c.others() == 1
    assert c.wait(0) == 0.0  # the call searches: it marks itself
    assert c.others() == 0, "a call back from idle is in a call again"
    c.end()


def test_an_idle_block_changes_nothing_for_a_searching_call() -> None:
    c = Courtesy()
    c.begin()
    c.wait(0)  # searching
    with c.idle():
        assert (c._running, c._searching, c.others()) == (1, 1, 0)
    assert (c._running, c._searching, c.others()) == (1, 1, 0)
    c.end()
    assert (c._running, c._searching) == (0, 0)


def test_a_waiting_search_wakes_when_the_call_goes_idle() -> None:
    c = Courtesy()
    c.begin()
    thread, out = _in_thread(lambda: c.wait(WAIT))
    _until(lambda: c._waiting == 1)
    with c.idle():
        thread.join(WAIT)
        assert not thread.is_alive()
    assert out["value"] < WAIT / 2, "woken, not timed out"
    c.end()


def test_a_podresources_call_waiting_for_the_kubelet_is_not_counted() -> None:
    """The forward to the kubelet (up to KUBELET_TIMEOUT_S) is outside the daemon."""
    c = Courtesy()
    install_courtesy(c)
    seen: list[int] = []

    class Kubelet:
        def GetAllocatableResources(self, request: Any, timeout: float) -> str:
            seen.append(c.others())
            return "theirs"

    try:
        servicer = PodResourcesServicer(lambda: cast(Any, None), cast(Any, Kubelet()))
        c.begin()
        assert servicer._ask_kubelet("GetAllocatableResources", object()) == "theirs"
        assert c.others() == 1, "counted again once the kubelet answered"
        c.end()
    finally:
        uninstall_courtesy(c)
    assert seen == [0]


def test_the_daemon_counts_its_calls_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's courtesy is installed while it serves, counts a call while its handler
    runs (GetState, seen from inside it), and is put back (to none) when it stops."""
    before = work_module.installed_courtesy()
    seen: list[int] = []
    get_state = MemoryManagerServicer.GetState

    def spy(self: MemoryManagerServicer, request: Any, context: Any) -> Any:
        courtesy = work_module.installed_courtesy()
        seen.append(-1 if courtesy is None else courtesy.others())
        return get_state(self, request, context)

    monkeypatch.setattr(MemoryManagerServicer, "GetState", spy)
    with serve_in_process() as server:
        courtesy = server.daemon.courtesy
        assert work_module.installed_courtesy() is courtesy
        server.client.get_state()
        assert seen == [1], "the call counted itself while it ran"
        assert courtesy.others() == 0, "and stopped counting when it ended"
    assert work_module.installed_courtesy() is before


def test_two_daemons_in_one_process_put_back_the_earlier_one() -> None:
    before = work_module.installed_courtesy()
    with serve_in_process() as first:
        with serve_in_process() as second:
            assert work_module.installed_courtesy() is second.daemon.courtesy
        assert work_module.installed_courtesy() is first.daemon.courtesy
    assert work_module.installed_courtesy() is before


def test_two_daemons_stopped_in_start_order_leave_none_installed() -> None:
    before = work_module.installed_courtesy()
    first = serve_in_process()
    second = serve_in_process()
    a = first.__enter__()
    b = second.__enter__()
    try:
        assert work_module.installed_courtesy() is b.daemon.courtesy
    finally:
        first.__exit__(None, None, None)
        assert work_module.installed_courtesy() is b.daemon.courtesy, "the running one stays"
        second.__exit__(None, None, None)
    assert work_module.installed_courtesy() is before
    assert a.daemon.courtesy is not b.daemon.courtesy


def test_a_refused_start_puts_the_courtesy_back(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a directory")
    cfg = default_config(tmp_path, tmp_path / "sys", state_dir=str(tmp_path / "state"))
    daemon = Daemon(cfg, build_components, set_umask=False)
    before = work_module.installed_courtesy()
    with pytest.raises(StartupError, match="state-dir"):
        daemon.start()
    assert work_module.installed_courtesy() is before


# --- an admission while a call never ends ----------------------------------------------------


def test_an_admission_gives_the_same_answer_while_another_call_never_ends() -> None:
    """The 40-node prefer-closest pod (issue 25) admitted while another call runs throughout:
    the search gives way at its pauses, each bounded, so it ends with the kubelet's answer
    (nothing wedges: the waits add at most the search's own time)."""
    m, reserved = machine(40, cluster_distance(12, 21))
    other = GivenHints(
        "cpu",
        {"c0": {"cpu": [TopologyHint(mask([0, 1]), False), TopologyHint(mask(range(22)), False)]}},
    )

    class Recording(Courtesy):
        waits = 0

        def wait(self, timeout: float) -> float:
            self.waits += 1
            return super().wait(timeout)

    courtesy = Recording()
    install_courtesy(courtesy)
    courtesy.begin()  # the call that never ends, on this thread
    try:
        mgr = manager(m, reserved, closest=True)
        thread, out = _in_thread(lambda: mgr.admit(guaranteed("p", "38Gi"), [other]))
        thread.join(60)
        assert not thread.is_alive()
    finally:
        courtesy.end()
        uninstall_courtesy(courtesy)
    outcome = out["value"]
    assert courtesy.waits > 0, "the search gave way"
    assert outcome.result.admitted
    assert outcome.result.merged["c0"] == TopologyHint(mask(range(12, 22)), False)
