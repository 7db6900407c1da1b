"""``numamem nri`` against the real daemon on fake multi-node machines, driven by the scripted
runtime: a Guaranteed pod ends pinned as the kubelet pins it.

The kubelet admits a pod's containers all at once and frees regular init containers as
later ones start (AddContainer); the plugin admits each container when the runtime creates
it. Where the kubelet's order makes the two equal (one pod's containers in spec order, no
other pod between them), the end state must be the same blocks and machine state: checked
against the upstream case's expected state, and against the daemon's own Admit of the
whole pod followed by the kubelet's AddContainer calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from numamem.api.convert import state_from_proto
from numamem.memorymanager.state.invariants import violations
from numamem.nriapi import api_pb2 as api
from numamem.testing.daemon import DaemonProcess
from numamem.testing.sysfs import write_sysfs
from numamem.v1 import memorymanager_pb2 as mm
from tests import kubelet_cases as kc
from tests.daemon import STATIC_ARGS
from tests.e2e.nri_node import GI, MI, Node, started_node

pytestmark = pytest.mark.e2e

NO_EVICTION = ["--eviction-hard", "memory.available<0%"]


def blocks_of(
    state: mm.GetStateResponse, uid: str
) -> dict[str, list[tuple[tuple[int, ...], str, int]]]:
    entry = state.entries.get(uid)
    if entry is None:
        return {}
    return {
        name: sorted((tuple(b.numa_affinity), b.type, b.size) for b in c.blocks)
        for name, c in entry.containers.items()
    }


def machine_of(state: mm.GetStateResponse) -> dict[int, Any]:
    machine, _ = state_from_proto(state)
    return kc.normalised_state(machine)


def assert_consistent(state: mm.GetStateResponse) -> None:
    machine, entries = state_from_proto(state)
    assert violations(machine, entries) == []


# --- the upstream case -------------------------------------------------------------------


def test_upstream_init_container_case_ends_in_the_kubelets_state(
    short_root: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """manager_allocate_add_init_containers/01: an init container asking 7Gi and 5 1Gi pages,
    then an app container asking 4Gi and 4 pages; the kubelet's end state (the init container
    freed, the app container on node 0 reusing its memory) is the plugin's."""
    case = kc.load_cases()
    [case_] = [c for c in case if c["id"] == "manager_allocate_add_init_containers/01"]
    machine = kc.seed_machine(case_)
    sysfs = write_sysfs(short_root / "sys", machine.nodes)
    with started_node(
        short_root, daemon_factory, ["--sysfs-root", str(sysfs), *machine.flags, *NO_EVICTION]
    ) as node:
        sandbox = node.run_pod("pod1", "pod1")
        [init] = case_["pod"]["init_containers"]
        [app] = case_["pod"]["containers"]

        def create(spec: dict[str, Any]) -> tuple[api.Container, api.CreateContainerResponse]:
            """The runtime creates the case's container ``spec`` in the pod."""
            limits = spec["limits"]
            return node.create(
                sandbox, spec["name"], limits["memory"], hugepages={"1GB": limits["hugepages-1Gi"]}
            )

        first, reply = create(init)
        assert reply.adjust.linux.resources.cpu.mems == "0"
        node.stop(first)
        _, reply = create(app)
        assert reply.adjust.linux.resources.cpu.mems == "0"
        assert not reply.adjust.linux.resources.cpu.cpus  # the CPU manager's, never touched
        state = node.client.get_state()
        machine_state, entries = state_from_proto(state)
        expected = kc.machine_state(case_["expect_machine_state"])
        kc.shift_memory_total(expected, machine.shift or {})
        assert kc.normalised_state(machine_state) == kc.normalised_state(expected)
        assert kc.normalised_assignments(entries) == kc.normalised_assignments(
            kc.assignments(case_["expect_assignments"])
        )


# --- the plugin's order against the daemon's admission of the whole pod ------------------


@dataclass(frozen=True)
class Spec:
    name: str
    memory: int
    pages_2m: int = 0
    """hugepages-2Mi bytes"""
    pages_1g: int = 0
    sidecar: bool = False

    def hugepages(self) -> dict[str, int]:
        out = {}
        if self.pages_2m:
            out["2MB"] = self.pages_2m
        if self.pages_1g:
            out["1GB"] = self.pages_1g
        return out

    def message(self) -> mm.Container:
        res = {"cpu": "1", "memory": str(self.memory)}
        if self.pages_2m:
            res["hugepages-2Mi"] = str(self.pages_2m)
        if self.pages_1g:
            res["hugepages-1Gi"] = str(self.pages_1g)
        return mm.Container(
            name=self.name,
            requests=res,
            limits=res,
            restart_policy="Always" if self.sidecar else "",
        )


def _reuse_row(sizes: tuple[int, int, int, int]) -> tuple[tuple[Spec, ...], tuple[Spec, ...]]:
    """kubelet TestStaticPolicyAllocateWithInitContainers: init1, init2, c1, c2 in GiB (here
    with as many 64Mi of 2Mi pages)."""
    i1, i2, c1, c2 = (
        Spec(n, s * GI, pages_2m=s * 64 * MI)
        for n, s in zip(("init1", "init2", "c1", "c2"), sizes, strict=True)
    )
    return (i1, i2), (c1, c2)


CASES = {
    "reuse-1-2-3-4": _reuse_row((1, 2, 3, 4)),
    "reuse-4-3-2-1": _reuse_row((4, 3, 2, 1)),
    "reuse-7-4-4-3": _reuse_row((7, 4, 4, 3)),
    "sidecar-then-init": (
        (Spec("side", 2 * GI, sidecar=True), Spec("init", 3 * GI, pages_1g=GI)),
        (Spec("app", 2 * GI, pages_1g=GI),),
    ),
    "init-larger-than-a-node": ((Spec("init", 20 * GI),), (Spec("app", 3 * GI),)),
    "apps-on-two-nodes": ((), (Spec("a", 10 * GI), Spec("b", 10 * GI, pages_1g=2 * GI))),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plugin_order_ends_as_the_admission_of_the_whole_pod(node: Node, case: str) -> None:
    inits, apps = CASES[case]
    # The kubelet: Admit the whole pod, then AddContainer each as it starts.
    whole = mm.Pod(
        uid="kubelet",
        namespace="default",
        name="whole",
        init_containers=[s.message() for s in inits],
        containers=[s.message() for s in apps],
    )
    assert node.client.admit(whole).admitted
    for i, spec in enumerate((*inits, *apps)):
        node.client.add_container(whole, spec.name, f"kubelet-{i}")
    kubelet = node.client.get_state()
    assert_consistent(kubelet)
    assert {r.container_name for r in node.client.release_pod("kubelet")} == set(
        blocks_of(kubelet, "kubelet")
    )
    assert not node.client.get_state().entries

    # The plugin: each container as the runtime creates it, init containers run to completion.
    sandbox = node.run_pod("whole", "plugin")
    created = {}
    for spec in (*inits, *apps):
        container, reply = node.create(sandbox, spec.name, spec.memory, hugepages=spec.hugepages())
        created[spec.name] = (container, reply.adjust.linux.resources.cpu.mems)
        if spec in inits and not spec.sidecar:
            node.stop(container)
    plugin = node.client.get_state()
    assert_consistent(plugin)
    assert blocks_of(plugin, "plugin") == blocks_of(kubelet, "kubelet")
    assert machine_of(plugin) == machine_of(kubelet)
    for name, blocks in blocks_of(plugin, "plugin").items():  # cpuset.mems = the blocks' nodes
        nodes = sorted({n for b in blocks for n in b[0]})
        assert created[name][1] == ",".join(map(str, nodes)), name


def test_two_pods_interleaved_hold_nothing_twice(node: Node) -> None:
    """Another pod's containers created between two of a pod's: each container is admitted
    on what is free then (a documented difference from the kubelet's all-at-once
    reservation), and the state stays consistent."""
    a, b = node.run_pod("a"), node.run_pod("b")
    node.create(a, "first", 8 * GI)  # nodes have 10 and 11 GiB of regular memory
    _, big = node.create(b, "big", 8 * GI)
    _, reply = node.create(a, "second", 2 * GI)
    state = node.client.get_state()
    assert_consistent(state)
    assert big.adjust.linux.resources.cpu.mems == "1"  # node 0 no longer has 8 GiB
    assert reply.adjust.linux.resources.cpu.mems == "0"  # the kubelet would have said the same
    reserved = sum(
        t.reserved
        for s in state.machine_state.values()
        for k, t in s.memory_map.items()
        if k == "memory"
    )
    assert reserved == 18 * GI


def test_burstable_and_besteffort_pods_are_left_alone(node: Node) -> None:
    guaranteed = node.run_pod("g")
    burstable = node.run_pod("b", "uid-b", cgroup_parent="/kubepods/burstable/poduid-b")
    besteffort = node.run_pod("e", "uid-e", cgroup_parent="/kubepods/besteffort/poduid-e")
    c, reply = node.create(burstable, "app", 2 * GI)
    assert not reply.adjust.HasField("linux")
    assert node.update(c, 4 * GI).update == []
    _, reply = node.create(besteffort, "app", None, cpu_milli=None)
    assert not reply.adjust.HasField("linux")
    _, reply = node.create(guaranteed, "app", 2 * GI)
    assert reply.adjust.linux.resources.cpu.mems == "0"
    assert node.client.get_state().entries.keys() == {guaranteed.uid}


def test_an_app_container_that_exits_before_the_next_is_admitted_again_at_its_restart(
    node: Node,
) -> None:
    """Two app containers; ``a`` crashes while the kubelet still pulls ``b``'s image. The
    runtime shows what a finished init container shows, so ``b`` is admitted reusing ``a``'s
    memory and ``a`` is freed (a documented deviation: the kubelet pins both for the pod's
    life). The kubelet re-creates ``a`` in the same sandbox (restartCount 1), which it never
    does for a regular init container that succeeded: ``a`` is admitted again, pinned, and
    the pod ends as the kubelet's."""
    p = node.run_pod("two-apps")
    a, first = node.create(p, "a", 4 * GI)
    node.stop(a)  # crashed before b was created
    node.create(p, "b", 4 * GI)
    assert set(node.client.get_state().entries[p.uid].containers) == {"b"}
    _, again = node.create(p, "a", 4 * GI)
    assert again.adjust.linux.resources.cpu.mems == first.adjust.linux.resources.cpu.mems == "0"
    state = node.client.get_state()
    assert blocks_of(state, p.uid) == {
        "a": [((0,), "memory", 4 * GI)],
        "b": [((0,), "memory", 4 * GI)],
    }
    assert_consistent(state)
    node.remove(a)  # the crashed instance: an older one, nothing released
    assert set(node.client.get_state().entries[p.uid].containers) == {"a", "b"}


@pytest.mark.parametrize("policy", ["best-effort", "single-numa-node"])
def test_memory_follows_the_cpu_managers_exclusive_cpus(
    short_root: Path, daemon_factory: list[DaemonProcess], policy: str
) -> None:
    """With the kubelet's static CPU manager and topology manager, the CreateContainer request
    carries the container's exclusive ``cpuset.cpus``; here CPUs 2-3, node 1 of the fake
    machine (node 0: CPUs 0-1). The kubelet's topology manager aligns memory with them: numamem
    merges the CPU manager's hint (the CPUs' nodes, preferred) and pins node 1. Shared-pool
    CPUs (every node) give no preference: node 0, numamem's own choice."""
    with started_node(
        short_root, daemon_factory, [*STATIC_ARGS, "--topology-manager-policy", policy]
    ) as node:
        exclusive = node.run_pod("exclusive")
        _, reply = node.create(exclusive, "app", 2 * GI, cpu_milli=2000, cpus="2-3")
        assert reply.adjust.linux.resources.cpu.mems == "1"
        assert not reply.adjust.linux.resources.cpu.cpus  # never touched
        shared = node.run_pod("shared")
        _, reply = node.create(shared, "app", 2 * GI, cpus="0-3")
        assert reply.adjust.linux.resources.cpu.mems == "0"
