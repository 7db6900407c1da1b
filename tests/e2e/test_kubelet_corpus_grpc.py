"""The upstream kubelet scenarios that the API can express, through gRPC on the real servicers.

Each scenario becomes a fake sysfs machine, a reservation configuration equal to
its ``system_reserved``, and a seeded ``memory_manager_state`` (plus numamem's
container map) in the state dir; the server then starts exactly as the daemon
does (restore and validateState) and the steps run as RPCs.

Not expressible through the API, with the reason:

* scenarios without a machine (``machine: null``) other than Start, and the
  policy-level Allocate/Remove/Hints tables, which seed states the kubelet's
  Start would never accept (e.g. ``cells: []`` on unused nodes): they run
  against the core in ``tests/unit/test_kubelet_corpus.py``;
* the ``mock`` policy (a Go test double);
* the manager scenarios listed in ``NOT_RESTORABLE``: their seeded machine
  states count hugepages as regular allocatable memory (the Go tests build the
  manager around them without Start), so no machine makes them pass
  validateState. For them the test asserts that the server refuses to start,
  which is what a daemon restoring such a file must do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from numamem.checkpoint.kubelet import encode_v1
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE, encode_containers
from numamem.client import state_from_proto
from numamem.config import parse_eviction_hard, parse_reserved_memory, parse_reserved_resources
from numamem.errors import NumamemError
from numamem.testing.server import InProcessServer, serve_in_process
from numamem.testing.sysfs import FakeNode
from tests import kubelet_cases as kc
from tests.daemon import short_tmpdir

pytestmark = pytest.mark.e2e
CASES = kc.load_cases(exclude=kc.CHECKPOINT_FILES)
START = [c for c in CASES if c["kind"] == "start"]
MANAGER = [c for c in CASES if c["kind"] == "manager" and c["policy"] != "mock"]
PROJECT_ERRORS = {"static_start/08", "static_start/09", "static_start/10"}
NOT_RESTORABLE = {
    "manager_allocate_add_init_containers/01",
    "manager_hints/01",
    "manager_hints/02",
    "manager_remove_container/01",
    "manager_remove_container/02",
    "manager_remove_container/03",
    "manager_remove_stale_state/02",
    "manager_remove_stale_state/03",
}


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def fake_nodes(case: dict[str, Any]) -> list[FakeNode]:
    machine = case.get("machine") or {
        "numa_nodes": [{"id": 0, "memory_bytes": 4 << 30, "hugepages": []}]
    }
    return [
        FakeNode(
            n["id"],
            n["memory_bytes"] // 1024,
            str(n["id"]),
            {h["page_size_kb"]: (h["num_pages"], h["num_pages"]) for h in n.get("hugepages") or []},
        )
        for n in machine["numa_nodes"]
    ]


def reservation_config(case: dict[str, Any]) -> dict[str, Any]:
    reserved = kc.system_reserved(case.get("system_reserved"))
    spec = ";".join(
        f"{n}:" + ",".join(f"{k}={v}" for k, v in res.items())
        for n, res in sorted(reserved.items())
        if res
    )
    total = sum(res.get("memory", 0) for res in reserved.values())
    return {
        "reserved_memory": parse_reserved_memory(spec, "case") if spec else (),
        "system_reserved": parse_reserved_resources(f"memory={total}", "case") if total else (),
        "eviction_hard": parse_eviction_hard("", "case"),
    }


def seed(root: Path, case: dict[str, Any]) -> None:
    state = root / "state"
    state.mkdir(mode=0o700)
    if case.get("initial_machine_state") is not None or case.get("initial_assignments"):
        ms = kc.machine_state(case.get("initial_machine_state"))
        entries = kc.assignments(case.get("initial_assignments"))
        (state / STATE_FILE).write_bytes(encode_v1("Static", ms, entries))
    ids = {
        e["container_id"]: (e["pod_uid"], e["container"])
        for e in case.get("initial_container_map") or []
    }
    if ids:
        (state / CONTAINERS_FILE).write_bytes(encode_containers(ids))
    os.sync()


def served_state(server: InProcessServer) -> tuple[dict[int, Any], dict[str, Any]]:
    return state_from_proto(server.client.get_state())


def expect_state(case: dict[str, Any], server: InProcessServer) -> None:
    machine, entries = served_state(server)
    if case.get("expect_machine_state") is not None:
        assert kc.normalised_state(machine) == kc.normalised_state(
            kc.machine_state(case["expect_machine_state"])
        )
    if case.get("expect_assignments") is not None:
        assert kc.normalised_assignments(entries) == kc.normalised_assignments(
            kc.assignments(case["expect_assignments"])
        )


@pytest.mark.parametrize("case", START, ids=[c["id"] for c in START])
def test_start_scenarios_through_the_daemon_bootstrap(root: Path, case: dict[str, Any]) -> None:
    seed(root, case)
    expected = case.get("expect_error")
    if expected is None:
        with serve_in_process(fake_nodes(case), root=root, **reservation_config(case)) as server:
            expect_state(case, server)
        return
    with (
        pytest.raises(NumamemError) as info,
        serve_in_process(fake_nodes(case), root=root, **reservation_config(case)),
    ):
        pass
    if case["id"] in PROJECT_ERRORS:
        assert "exceed the node's MemTotal" in str(info.value)
    else:
        assert str(info.value) == expected


@pytest.mark.parametrize("case", MANAGER, ids=[c["id"] for c in MANAGER])
def test_manager_scenario_seeds_are_refused_by_the_daemon(root: Path, case: dict[str, Any]) -> None:
    """The operations of these scenarios run against the core (test_kubelet_corpus.py) and
    through gRPC on consistent states (test_memorymanager_service.py, test_memorymanager_daemon.py)."""
    assert case["id"] in NOT_RESTORABLE, (
        "a restorable manager scenario needs a gRPC step runner here"
    )
    seed(root, case)
    with (
        pytest.raises(NumamemError) as info,
        serve_in_process(fake_nodes(case), root=root, **reservation_config(case)),
    ):
        pass
    assert (
        str(info.value)
        == "[memorymanager] the expected machine state is different from the real one"
    )
