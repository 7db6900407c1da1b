"""Drift tolerance (KEP-6232 and numamem's fit): options, bounds, the auto bound, reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from numamem.errors import AllocationError, ConfigError, StateMismatchError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.options import (
    ParsedOptions,
    StaticOptions,
    parse_options,
    tolerance,
    verify_hugepages,
)
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state import drift
from numamem.memorymanager.state.store import InMemoryStore
from numamem.pod import Container, Pod
from numamem.quantity import parse_quantity
from numamem.topology import HugePagePool, Machine, NUMANode
from numamem.topology.iomem import AUTO_SLACK, auto_drift_bound, kernel_image_span
from numamem.topologymanager.policy import TopologyHint, new_policy

GI = 1024**3
MI = 1024**2


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, ParsedOptions(drift.FIT)),
        ({"memory-drift-tolerance": "off"}, ParsedOptions(drift.OFF)),
        ({"memory-drift-tolerance": "auto"}, ParsedOptions(drift.AUTO)),
        ({"memory-drift-tolerance": "fit"}, ParsedOptions(drift.FIT)),
        ({"memory-drift-tolerance": "128Mi"}, ParsedOptions(str(128 * MI), 128 * MI)),
        ({"memory-drift-tolerance": "0"}, ParsedOptions("0", 0)),
        ({"hugepages-availability-verification": "true"}, ParsedOptions(drift.FIT, 0, True)),
    ],
)
def test_options_parse(options: dict[str, str], expected: ParsedOptions) -> None:
    assert parse_options(options) == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"memory-drift": "off"}, 'unknown Memory Manager Policy option: "memory-drift"'),
        (
            {"memory-drift-tolerance": "-1Mi"},
            'bad value for option "memory-drift-tolerance": "-1Mi" is negative',
        ),
        ({"memory-drift-tolerance": "lots"}, 'bad value for option "memory-drift-tolerance": '),
        ({"memory-drift-tolerance": "fitt"}, 'bad value for option "memory-drift-tolerance": '),
        (
            {"hugepages-availability-verification": "yes"},
            'bad value for option "hugepages-availability-verification": strconv.ParseBool',
        ),
    ],
)
def test_option_errors_have_upstreams_texts(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(options)
    assert str(info.value).startswith(message)


def test_auto_is_the_kernel_image_span_plus_64mi(tmp_path: Path) -> None:
    (tmp_path / "iomem").write_text(
        "00000000-00000fff : Reserved\n"
        "  01000000-01ffffff : Kernel code\n"
        "  02000000-02bfffff : Kernel data\n"
        "  02c00000-03ffffff : Kernel bss\n"
        "  zz-yy : Kernel code\n"
        "  05000000-04000000 : Kernel data\n"
    )
    assert kernel_image_span(tmp_path) == 0x03FFFFFF - 0x01000000 + 1
    assert auto_drift_bound(tmp_path) == 48 * MI + AUTO_SLACK
    (tmp_path / "iomem").write_text(
        "00000000-00000000 : Kernel code\n00000000-00000000 : Kernel bss\n"
    )
    assert kernel_image_span(tmp_path) is None  # without CAP_SYS_ADMIN addresses read as 0
    assert kernel_image_span(tmp_path / "missing") is None
    assert tolerance(ParsedOptions(drift.AUTO), None) == drift.Tolerance(drift.OFF, 0, drift.AUTO)
    assert tolerance(ParsedOptions(drift.AUTO), 5) == drift.Tolerance("bound", 5, drift.AUTO)


def machine(memory: int = 16 * GI, pages: int = 4, count: int = 2) -> Machine:
    return Machine(
        tuple(
            NUMANode(i, memory + pages * GI, (HugePagePool(1048576, pages, pages),))
            for i in range(count)
        )
    )


def pinned(m: Machine) -> Manager:
    manager = Manager(StaticPolicy(m, {0: {"memory": GI}}), InMemoryStore())
    manager.start()
    res = {
        "cpu": parse_quantity("1"),
        "memory": parse_quantity("4Gi"),
        "hugepages-1Gi": parse_quantity("1Gi"),
    }
    manager.allocate(
        Pod("p", "ns", "p", (), (Container("c", res, dict(res)),)),
        "c",
        TopologyHint(0b10, True),  # node 1
    )
    return manager


def restart(manager: Manager, m: Machine, tol: drift.Tolerance) -> Manager:
    assert isinstance(manager._store, InMemoryStore)
    again = Manager(
        StaticPolicy(m, {0: {"memory": GI}}, options=StaticOptions(tol)), manager._store
    )
    again.start()
    return again


@pytest.mark.parametrize(
    ("delta", "bound", "accepted"),
    [
        (0, 0, True),
        (64 * MI, 64 * MI, True),
        (64 * MI + 1, 64 * MI, False),
        (-64 * MI, 64 * MI, True),
    ],
)
def test_bound_is_inclusive_on_memory_total_and_allocatable(
    delta: int, bound: int, accepted: bool
) -> None:
    manager = pinned(machine())
    changed = machine(16 * GI + delta)
    tol = drift.Tolerance("bound", bound, str(bound))
    if accepted:
        again = restart(manager, changed, tol)
        assert again.get_memory("p", "c") == manager.get_memory("p", "c")
        assert again.policy.drift[(0, "memory")] == delta  # type: ignore[attr-defined]
    else:
        with pytest.raises(StateMismatchError):
            restart(manager, changed, tol)


@pytest.mark.parametrize("value", ["fitt", "-1Mi", "lots"])
def test_a_bad_tolerance_lists_the_allowed_values(value: str) -> None:
    """`fitt` said only `quantities must match the regular expression ...` (issue 26)."""
    with pytest.raises(ConfigError) as info:
        parse_options({"memory-drift-tolerance": value})
    assert str(info.value).endswith("; allowed: fit|off|auto|<quantity> (e.g. 128Mi)")


@pytest.mark.parametrize(
    ("tolerance", "line"),
    [
        (drift.EXACT, "memory-drift-tolerance=off is in force: the state must match exactly"),
        (
            drift.Tolerance("bound", 600 * MI, "600Mi"),
            "memory-drift-tolerance=600Mi is in force (a bound of 600Mi (629145600)): the memory "
            "moved by up to 640Mi (671088640)",
        ),
        (
            drift.Tolerance("bound", 72 * MI, "auto"),
            "memory-drift-tolerance=auto is in force (auto's bound on this machine: the kernel "
            "image span + 64Mi = 72Mi (75497472)): the memory moved by up to 640Mi",
        ),
        (
            drift.Tolerance(drift.OFF, 0, "auto"),
            "memory-drift-tolerance=auto is in force but has no bound on this machine",
        ),
    ],
)
def test_drift_refusals_name_the_tolerance_in_force(tolerance: drift.Tolerance, line: str) -> None:
    """Refusals under a bound or auto read exactly as under off (issue 26): the second line
    now says which tolerance refused, its bound (auto's computed one) and the drift."""
    manager = pinned(machine())
    with pytest.raises(StateMismatchError) as info:
        restart(manager, machine(16 * GI + 640 * MI), tolerance)
    assert str(info.value).splitlines()[2].startswith("  " + line)


@pytest.mark.parametrize("record", [True, False])
def test_refusals_name_pods_by_namespace_and_name_where_recorded(record: bool) -> None:
    """Issue 26: refusals named containers by pod uid although namespace and name were
    recorded (the manager records them with --podresources-socket)."""
    store = InMemoryStore()
    first = Manager(StaticPolicy(machine(), {0: {"memory": GI}}), store, record_pod_names=record)
    first.start()
    res = {"cpu": parse_quantity("1"), "memory": parse_quantity("10Gi")}
    first.allocate(Pod("u-7", "shop", "web", (), (Container("app", res, dict(res)),)), "app")
    again = Manager(StaticPolicy(machine(8 * GI), {0: {"memory": GI}}), store)
    with pytest.raises(StateMismatchError) as info:
        again.start()
    text = str(info.value)
    if record:
        assert "containers with blocks there: shop/web/app (pod u-7)" in text
        assert "(pod: shop/web (u-7), container: app) the memory assignment does not fit" in text
    else:
        assert "containers with blocks there: u-7/app" in text
        assert "(pod: u-7, container: app)" in text


def test_off_is_the_kubelets_exact_comparison() -> None:
    manager = pinned(machine())
    restart(manager, machine(), drift.EXACT)  # unchanged: starts
    with pytest.raises(StateMismatchError) as info:
        restart(manager, machine(16 * GI + 1), drift.EXACT)
    assert str(info.value).splitlines()[0] == drift.KUBELET_MISMATCH


def test_bound_never_accepts_other_types_or_reservations() -> None:
    manager = pinned(machine())
    with pytest.raises(StateMismatchError) as info:
        restart(manager, machine(pages=5), drift.Tolerance("bound", 100 * GI, "100Gi"))
    assert "node 0 hugepages-1Gi TotalMemSize" in str(info.value)
    assert "memory-drift-tolerance=fit accepts this" in str(info.value)
    again = restart(manager, machine(pages=5), drift.DEFAULT)
    assert again.reader().get_machine_state()[1].memory_map["hugepages-1Gi"].reserved == GI  # type: ignore[union-attr, index]


def test_fit_refuses_what_no_longer_fits_and_names_it() -> None:
    manager = pinned(machine())
    with pytest.raises(StateMismatchError) as info:
        restart(manager, machine(memory=2 * GI), drift.DEFAULT)
    text = str(info.value)
    assert (
        "(pod: p, container: c) the memory assignment does not fit the machine state: 4Gi memory on nodes [1]"
        in text
    )
    assert "containers with blocks there: p/c" in text
    assert "no drift tolerance accepts this" in text


def test_check_restore_reports_the_gauge_and_accepting_values() -> None:
    manager = pinned(machine())
    stored = manager.reader().get_machine_state()
    assignments = manager.reader().get_memory_assignments()
    policy = StaticPolicy(machine(16 * GI + 10 * MI), {0: {"memory": GI}})
    verdict = drift.check_restore(
        stored, assignments, policy.default_machine_state(), drift.EXACT, 100 * MI
    )
    assert not verdict.accepted
    assert verdict.accepting == ["auto", "10Mi", "fit"]
    assert verdict.drift[(0, "memory")] == 10 * MI and verdict.drift[(0, "hugepages-1Gi")] == 0


def test_hugepage_verification_uses_what_the_kernel_reports() -> None:
    m = machine()
    free = {(0, 1048576): 1, (1, 1048576): 0}
    with pytest.raises(AllocationError) as info:
        verify_hugepages(
            m, lambda n, kb: free[(n, kb)], [0, 1], {"memory": GI, "hugepages-1Gi": 2 * GI}, {}
        )
    assert (
        str(info.value)
        == "insufficient hugepages-1Gi on NUMA node(s) [0,1]: requested 2Gi, available 1Gi"
    )
    verify_hugepages(m, lambda n, kb: free[(n, kb)], [0], {"hugepages-1Gi": GI}, {})
    verify_hugepages(
        m, lambda n, kb: 0, [0], {"hugepages-1Gi": GI}, {"hugepages-1Gi": GI}
    )  # reused


def no_free_hugepages(topology_policy: str | None = None) -> tuple[Manager, Pod]:
    """A manager whose kernel reports no free hugepages, and a pod asking for 1Gi of them."""
    m = machine()
    topology = None if topology_policy is None else new_policy(topology_policy, m, {})[0]
    opts = StaticOptions(free_hugepages=lambda n, kb: 0)
    manager = Manager(StaticPolicy(m, {0: {"memory": GI}}, options=opts), InMemoryStore(), topology)
    manager.start()
    res = {
        "cpu": parse_quantity("1"),
        "memory": parse_quantity("1Gi"),
        "hugepages-1Gi": parse_quantity("1Gi"),
    }
    return manager, Pod("p", "ns", "p", (), (Container("c", res, dict(res)),))


def test_hugepage_verification_refuses_the_allocation() -> None:
    manager, pod = no_free_hugepages()
    with pytest.raises(
        AllocationError,
        match=r"insufficient hugepages-1Gi on NUMA node\(s\) \[0\]: requested 1Gi, available 0",
    ):
        manager.allocate(pod, "c")
    assert manager.get_memory("p", "c") == []


def test_explain_shows_the_hugepage_verification_reason() -> None:
    manager, pod = no_free_hugepages("best-effort")
    result = manager.explain(pod).outcome.result
    assert (result.admitted, result.reason) == (False, "UnexpectedAdmissionError")
    assert result.message == (
        "Allocate failed due to insufficient hugepages-1Gi on NUMA node(s) [0]: requested 1Gi, "
        "available 0, which is unexpected"
    )
    assert manager.admit(pod).result.message == result.message
