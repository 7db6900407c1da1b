"""Every upstream kubelet scenario that the daemon's flags can express, through `numamem serve`.

Each scenario becomes a fake sysfs machine, `numamem serve` flags (policy,
`--reserved-memory`, `--system-reserved`, and `--eviction-hard
memory.available<0%` so that node allocatable is exactly what the scenario
reserves, as the kubelet's threshold parser allows), and, where it has one, a
seeded `memory_manager_state` (plus numamem's container map) in the state dir.
The real daemon then starts as in production (restore, validateState) and the
scenario's operations run as RPCs; a refusal is the daemon's one-line exit.

Translation of seeds. The Go tests build the manager around seeded states
without Start, and most seeds count hugepages as regular allocatable memory
(allocatable = total - systemReserved). No machine gives such a state, so it
is run on the machine that gives the same allocatable, reserved and free
numbers: MemTotal = allocatable + systemReserved + hugepages. Only
``memory.total`` then differs from the seed, by the node's hugepage total; the
expected state is compared after the same shift (:func:`kc.seed_machine`).
Seeds that no machine can restore even so are listed in ``UNRESTORABLE``, and
the test asserts that the daemon refuses them, as a daemon restoring such a
file must.

Over gRPC, Go's nil hints and an empty hint map are the same answer (no
preference: no key in ``hints``).

Scenarios the API cannot express are listed in ``NOT_EXPRESSIBLE`` with the
reason; they run against the core in ``tests/unit/test_kubelet_corpus.py``.
``test_every_scenario_is_run_or_explained`` keeps the lists complete.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from numamem.api.convert import state_from_proto
from numamem.checkpoint.containerfile import encode_containers
from numamem.checkpoint.kubeletwrite import encode_v1
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE
from numamem.client import NumamemClient
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import FakeNode, write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from tests import kubelet_cases as kc

pytestmark = pytest.mark.e2e

ALL = kc.load_cases()
BY_ID = {c["id"]: c for c in ALL}

NOT_EXPRESSIBLE = {
    "manager_get_system_reserved/01": (
        "no reservation at all: the conversion gives an empty map, and the Static policy that would "
        "use it then refuses to start ('you should specify the system reserved memory', asserted by "
        "static_new/01 here); the None policy never converts"
    ),
    "manager_validate_reserved/01": "as manager_get_system_reserved/01 (nothing reserved, no error)",
    "manager_validate_reserved/02": (
        "a zero reservation: the kubelet's (and numamem's) configuration validation refuses "
        "'reserved memory may not be zero' before the memory manager is built"
    ),
    "manager_validate_reserved/04": "node allocatable hugepages: --system-reserved cannot reserve hugepages",
    "manager_validate_reserved/07": "node allocatable hugepages (as /04)",
    "manager_validate_reserved/08": "node allocatable hugepages (as /04)",
    "manager_convert_reserved/01": "no reservation (as manager_get_system_reserved/01)",
    "manager_convert_reserved/02": (
        "reserves hugepages on a machine that has none, with no node allocatable: validation, "
        "which the kubelet runs before converting, refuses it"
    ),
    "manager_convert_reserved/03": "as manager_convert_reserved/02",
    "none_can_allocate_exclusively/01": "CanAllocateExclusively is an in-process call, not an RPC",
    "best_effort_can_allocate_exclusively/01": (
        "BestEffort is the Windows-only policy; on Linux the daemon refuses it with the kubelet's "
        "text (test_best_effort_is_refused_on_linux)"
    ),
    "manager_remove_stale_state/01": "the mock policy is a Go test double",
    "static_hints/02": "a seed with assignments but no machine state, which no start accepts",
    "static_hints/04": "as static_hints/02",
    "static_hints/05": "as static_hints/02",
    "static_hints/06": "as static_hints/02",
    "checkpoint_restore/01": (
        "the upstream checkpoint tests use the policy name 'static' (lower case), which is not a "
        "valid --memory-manager-policy; the files are read in tests/unit/test_checkpoint.py"
    ),
    "checkpoint_restore/02": "as checkpoint_restore/01",
    "checkpoint_restore/03": "as checkpoint_restore/01",
    "checkpoint_restore/04": "as checkpoint_restore/01",
    "checkpoint_store/01": "an in-process round trip of the state store",
    "checkpoint_accessors/01": "in-process accessors of the state",
    "checkpoint_accessors/02": "in-process accessors of the state",
    "checkpoint_accessors/03": "in-process accessors of the state",
    "checkpoint_clear/01": "in-process ClearState",
}

# Policy-level seeds that stay inconsistent on every machine: the daemon must refuse them.
UNRESTORABLE = {
    "static_allocate/02": "reserved memory on a node whose numberOfAssignments is 0",
    "static_allocate/06": "a multi-NUMA group with reserved memory but no blocks",
    "static_remove/01": "an unused node whose cells are [] instead of [itself]",
}

# Scenarios whose decision does not depend on the seed: a non-Guaranteed pod is never the
# memory manager's business. They run on a fresh state of the seed's machine.
FRESH_STATE = {"static_allocate/01", "static_hints/01"}

# validateState scenarios on machines whose hugepages exceed the node's memory: upstream wraps
# around in uint64; numamem refuses the machine with its own text (see test_kubelet_corpus.py).
PROJECT_ERRORS = {
    "static_start/08": "exceed the node's MemTotal",
    "static_start/09": "exceed the node's MemTotal",
    "static_start/10": "exceed the node's MemTotal",
}

CONFIG_KINDS = ("policy_new", "policy_name", "manager_new", "system_reserved", "reserved_validate")
CONFIG = [c for c in ALL if c["kind"] in CONFIG_KINDS and c["id"] not in NOT_EXPRESSIBLE]
START = [c for c in ALL if c["kind"] == "start"]
MANAGER = [c for c in ALL if c["kind"] == "manager" and c["id"] not in NOT_EXPRESSIBLE]
POLICY_OPS = [
    c
    for c in ALL
    if c["kind"] in ("allocate", "hints", "remove")
    and c["id"] not in NOT_EXPRESSIBLE
    and c["id"] not in UNRESTORABLE
]
REQUESTED = [c for c in ALL if c["kind"] == "pod_requested_resources"]
NO_EVICTION = ["--eviction-hard", "memory.available<0%"]
KUBELET_RESTORE = ["--memory-manager-policy-options", "memory-drift-tolerance=off"]
"""validateState as the kubelet has it (numamem's default, fit, restarts on more machines)."""


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in cases]


def test_every_scenario_is_run_or_explained() -> None:
    run = {*ids(CONFIG), *ids(START), *ids(MANAGER), *ids(POLICY_OPS), *ids(REQUESTED)}
    listed = set(NOT_EXPRESSIBLE) | set(UNRESTORABLE)
    assert run.isdisjoint(listed)
    assert run | listed == set(BY_ID), sorted(set(BY_ID) - run - listed)
    assert len(BY_ID) == 79
    # The six scenarios the fresh-clone issue names run through the daemon.
    assert {
        "manager_get_system_reserved/02",
        "manager_new/03",
        "manager_validate_reserved/03",
        "static_new/01",
        "static_allocate/01",
        "static_hints/01",
    } <= run


# --- running the daemon ------------------------------------------------------------------


def daemon(root: Path, nodes: list[FakeNode], flags: list[str]) -> DaemonProcess:
    sysfs = write_sysfs(root / "sys", nodes)
    return DaemonProcess(root, ["--sysfs-root", str(sysfs), *flags])


def assert_refused(d: DaemonProcess, expected: str, *, usage: bool = False) -> None:
    """The daemon exits 1, its refusal line (``numamem: ``, the last one that is not an indented
    detail) carrying the kubelet's text verbatim; with ``usage`` (one flag's value out of
    range, e.g. a policy this platform does not have) it exits 2 with the text in argparse's
    error line (``numamem serve: error: ``) after the usage."""
    out = d.run_to_exit(*d.args)
    assert out.returncode == (2 if usage else 1), out.stderr
    lines = out.stderr.strip().splitlines()
    while lines and lines[-1].startswith("  "):
        lines.pop()
    last = lines[-1]
    assert last.startswith("numamem serve: error: " if usage else "numamem: "), last
    assert expected in last, last


USAGE_ERRORS = {"manager_new/04"}
"""Configuration scenarios whose error is one flag's value (the policy name): usage errors."""


def seed(d: DaemonProcess, state: kc.Seed | None, ids_map: dict[str, tuple[str, str]]) -> None:
    directory = Path(d.state_dir)
    directory.mkdir(mode=0o700)
    if state is not None:
        (directory / STATE_FILE).write_bytes(encode_v1("Static", state.machine, state.assignments))
    if ids_map:
        (directory / CONTAINERS_FILE).write_bytes(encode_containers(ids_map))
    os.sync()


def start(d: DaemonProcess, started: list[DaemonProcess]) -> NumamemClient:
    started.append(d)
    d.start()
    return NumamemClient(d.socket, timeout=10)


def expect_state(
    case: dict[str, Any], client: NumamemClient, shift: dict[int, int] | None = None
) -> None:
    machine, entries = state_from_proto(client.get_state())
    if case.get("expect_machine_state") is not None:
        expected = kc.machine_state(case["expect_machine_state"])
        kc.shift_memory_total(expected, shift or {})
        assert kc.normalised_state(machine) == kc.normalised_state(expected)
    if case.get("expect_assignments") is not None:
        assert kc.normalised_assignments(entries) == kc.normalised_assignments(
            kc.assignments(case["expect_assignments"])
        )


def hints_json(resp: mm.GetTopologyHintsResponse) -> dict[str, list[dict[str, Any]]] | None:
    """Go's nil and an empty map are the same over gRPC: no key means no preference."""
    if not resp.hints:
        return None
    return {
        name: [{"numa_nodes": list(h.numa_nodes), "preferred": h.preferred} for h in lst.hints]
        for name, lst in resp.hints.items()
    }


def affinity_proto(data: dict[str, Any] | None) -> mm.TopologyHint | None:
    if data is None or (data.get("numa_nodes") is None and not data.get("preferred")):
        return None  # Go's TopologyHint{}: no affinity stored
    return mm.TopologyHint(numa_nodes=data.get("numa_nodes") or [], preferred=data["preferred"])


# --- configuration: policies, reservations, node allocatable -----------------------------


@pytest.mark.parametrize("case", CONFIG, ids=ids(CONFIG))
def test_configuration_scenarios(
    short_root: Path, daemon_factory: list[DaemonProcess], case: dict[str, Any]
) -> None:
    nodes, flags = kc.config_flags(case)
    d = daemon(short_root, nodes, [*flags, *NO_EVICTION])
    if case.get("expect_error"):
        assert_refused(d, case["expect_error"], usage=case["id"] in USAGE_ERRORS)
        return
    client = start(d, daemon_factory)
    state = client.get_state()
    assert state.policy_name == (
        case.get("expect_name") or case.get("expect_policy_name") or "Static"
    )
    expected = case.get("expect_system_reserved")
    if expected is None and case["kind"] == "policy_new":
        expected = case["system_reserved"]
    if expected is not None and state.policy_name == "Static":
        reserved = {
            node: {k: t.system_reserved for k, t in s.memory_map.items() if t.system_reserved}
            for node, s in state.machine_state.items()
        }
        assert reserved == {int(n): {k: v for k, v in r.items() if v} for n, r in expected.items()}


EVICTION_SCENARIOS = [
    "manager_get_system_reserved/02",
    "manager_new/03",
    "manager_validate_reserved/03",
    "static_new/01",
]


@pytest.mark.parametrize("case_id", EVICTION_SCENARIOS)
@pytest.mark.parametrize("value", ["0%", "100%"])
def test_eviction_threshold_disabled_in_the_config_file(
    short_root: Path, case_id: str, value: str
) -> None:
    """The same scenarios with ``evictionHard`` in the YAML file instead of the flag."""
    case = BY_ID[case_id]
    nodes, flags = kc.config_flags(case)
    config = short_root / "numamem.yaml"
    config.write_text(f'evictionHard:\n  memory.available: "{value}"\n')
    d = daemon(short_root, nodes, [*flags, "--config", str(config)])
    assert_refused(d, case["expect_error"])


def test_best_effort_is_refused_on_linux(short_root: Path) -> None:
    d = daemon(short_root, kc.DEFAULT_NODES, ["--memory-manager-policy", "BestEffort"])
    assert_refused(d, 'policy "BestEffort" is not available for platform "linux"', usage=True)


# --- start-up: validateState against the machine ------------------------------------------


@pytest.mark.parametrize("case", START, ids=ids(START))
def test_start_scenarios(
    short_root: Path, daemon_factory: list[DaemonProcess], case: dict[str, Any]
) -> None:
    nodes, flags = kc.start_flags(case)
    d = daemon(short_root, nodes, [*flags, *NO_EVICTION, *KUBELET_RESTORE])
    state = kc.Seed(
        kc.machine_state(case.get("initial_machine_state")),
        kc.assignments(case.get("initial_assignments")),
    )
    seed(d, state if state.machine or state.assignments else None, {})
    if case["id"] in PROJECT_ERRORS:
        assert_refused(d, PROJECT_ERRORS[case["id"]])
    elif case.get("expect_error"):
        assert_refused(d, case["expect_error"])
    else:
        expect_state(case, start(d, daemon_factory))


# --- the manager: allocate, add, remove, stale state, hints --------------------------------


@pytest.mark.parametrize("case", MANAGER, ids=ids(MANAGER))
def test_manager_scenarios(
    short_root: Path, daemon_factory: list[DaemonProcess], case: dict[str, Any]
) -> None:
    """The kubelet runs removeStaleState with the active pods plus the pod pending admission
    (set by Allocate and GetTopologyHints); over the API that is SyncActivePods of that list."""
    machine = kc.seed_machine(case)
    d = daemon(short_root, machine.nodes, [*machine.flags, *NO_EVICTION])
    container_ids = {
        e["container_id"]: (e["pod_uid"], e["container"])
        for e in case.get("initial_container_map") or []
    }
    seed(d, machine.seed, container_ids)
    client = start(d, daemon_factory)
    active = [kc.pod_proto(p) for p in case.get("active_pods") or []]
    pod = kc.pod_proto(case["pod"]) if case.get("pod") else None
    pending: mm.Pod | None = None

    def sync() -> None:
        known = {p.uid for p in active}
        client.sync_active_pods(
            [*active, *([pending] if pending is not None and pending.uid not in known else [])]
        )

    for step in case["steps"]:
        op = step["op"]
        if op in ("allocate", "get_topology_hints"):
            assert pod is not None
            pending = pod
        if op in ("allocate", "get_topology_hints", "remove_stale_state"):
            sync()
        if op == "allocate":
            assert pod is not None
            kc.expect_rpc_error(
                lambda name=step["container"]: client.allocate(pod, name), step["expect_error"]
            )
        elif op == "add_container":
            assert pod is not None
            client.add_container(pod, step["container"], step["container_id"])
        elif op == "remove_container":
            client.remove_container(step["container_id"])
        elif op == "get_topology_hints":
            assert pod is not None
            assert (
                hints_json(client.get_topology_hints(pod, step["container"]))
                == case["expect_hints"]
            )
        elif op != "remove_stale_state":
            pytest.fail(f"unknown step {op}")
    expect_state(case, client, machine.shift)


# --- policy-level Allocate, hints and RemoveContainer ------------------------------------


@pytest.mark.parametrize("case", POLICY_OPS, ids=ids(POLICY_OPS))
def test_policy_scenarios(
    short_root: Path, daemon_factory: list[DaemonProcess], case: dict[str, Any]
) -> None:
    machine = kc.seed_machine(case)
    d = daemon(short_root, machine.nodes, [*machine.flags, *NO_EVICTION])
    fresh = case["id"] in FRESH_STATE
    remove_ids = {}
    if case["kind"] == "remove":
        ref = (case["remove"]["pod_uid"], case["remove"]["container"])
        remove_ids = {"/".join(ref): ref}
    seed(d, None if fresh else machine.seed, remove_ids)
    client = start(d, daemon_factory)
    before = client.get_state()
    if case["kind"] == "hints":
        pod = kc.pod_proto(case["pod"])
        assert hints_json(client.get_topology_hints(pod, case["container"])) == case["expect_hints"]
        assert client.get_state() == before
        return
    if case["kind"] == "remove":
        client.remove_container("/".join((case["remove"]["pod_uid"], case["remove"]["container"])))
    else:
        pod = kc.pod_proto(case["pod"])
        affinity = affinity_proto(case.get("affinity"))
        for name in case["allocate"]:
            kc.expect_rpc_error(
                lambda n=name: client.allocate(pod, n, affinity), case["expect_error"]
            )
    if fresh:
        # A fresh state: what the scenario shows is that nothing changed.
        assert client.get_state() == before
        assert case["expect_assignments"] == {}
    elif case.get("expect_error") is None:
        expect_state(case, client, machine.shift)
    else:
        assert client.get_state() == before  # a refused Allocate changes nothing


@pytest.mark.parametrize("case_id", sorted(UNRESTORABLE))
def test_unrestorable_seeds_are_refused(short_root: Path, case_id: str) -> None:
    machine = kc.seed_machine(BY_ID[case_id])
    d = daemon(short_root, machine.nodes, [*machine.flags, *NO_EVICTION, *KUBELET_RESTORE])
    seed(d, machine.seed, {})
    assert_refused(d, "[memorymanager] the expected machine state is different from the real one")


# --- pod-level requests (getPodRequestedResources), as Explain shows them -----------------


@pytest.fixture(scope="module")
def pod_scope_daemon() -> Iterator[NumamemClient]:
    from numamem.testing.daemon import short_tmpdir

    root = short_tmpdir()
    d = daemon(
        root,
        kc.DEFAULT_NODES,
        [
            "--memory-manager-policy",
            "Static",
            "--reserved-memory",
            "0:memory=1Gi",
            "--system-reserved",
            "memory=1Gi",
            *NO_EVICTION,
            "--topology-manager-policy",
            "best-effort",
            "--topology-manager-scope",
            "pod",
        ],
    )
    try:
        d.start()
        with NumamemClient(d.socket, timeout=10) as client:
            yield client
    finally:
        d.kill()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("case", REQUESTED, ids=ids(REQUESTED))
def test_pod_requested_resources(pod_scope_daemon: NumamemClient, case: dict[str, Any]) -> None:
    """getPodRequestedResources reads requests only, and the kubelet calls it for Guaranteed pods
    only; the Go test's pods have requests but no limits (and no uid). The daemon gets the same
    requests with limits equal to them, which makes the pod Guaranteed, under a uid."""
    explained = pod_scope_daemon.explain(kc.pod_proto(case["pod"], guaranteed=True, uid="pod"))
    [step] = explained.containers
    assert step.container_name == ""  # the pod scope's single step
    assert dict(step.requested) == case["expect_requested"]
