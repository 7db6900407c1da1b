"""The plans of a reconciliation (numamem.nri.reconcile and .view), as literals."""

from __future__ import annotations

import pytest

from numamem.nri.kube import Limits
from numamem.nri.podrecord import Entry, Pin, PodRecord
from numamem.nri.reconcile import active_pods, adoption_candidates, mems_updates, rebuild
from numamem.nri.view import RuntimeView
from numamem.nriapi import api_pb2 as api
from numamem.testing import nri_objects as obj
from numamem.v1 import memorymanager_pb2 as mm

GI = 1 << 30


def blocks(*nodes: int) -> mm.MemoryBlocks:
    return mm.MemoryBlocks(blocks=[mm.MemoryBlock(numa_affinity=nodes, type="memory", size=GI)])


def a_view() -> tuple[RuntimeView, dict[str, api.Container]]:
    """Pod g (Guaranteed: a pinned, b pinned with a wrong cpuset.mems, c unknown, i stopped),
    pod u (Burstable), pod o (a cgroup parent nobody knows), an empty sandbox e."""
    g = obj.pod("g", "uid-g", sandbox_id="sb-g")
    u = obj.pod("u", "uid-u", sandbox_id="sb-u", cgroup_parent="kubepods/burstable/poduid-u")
    o = obj.pod("o", "uid-o", sandbox_id="sb-o", cgroup_parent="/elsewhere")
    e = obj.pod("e", "uid-e", sandbox_id="sb-e")
    made = {
        "i": obj.container(
            g, "i", memory_limit=GI, cpu_milli=100, state=api.CONTAINER_STOPPED, created_at=1
        ),
        "a": obj.container(g, "a", memory_limit=GI, cpu_milli=100, mems="0", created_at=2),
        "b": obj.container(g, "b", memory_limit=GI, cpu_milli=100, mems="0-1", created_at=3),
        "c": obj.container(g, "c", memory_limit=GI, cpu_milli=100, created_at=4),
        "n": obj.container(g, "n", memory_limit=GI, created_at=5),  # no CPU limit
        "u": obj.container(u, "app", memory_limit=GI, created_at=6),
        "o": obj.container(o, "app", memory_limit=GI, cpu_milli=100, created_at=7),
    }
    view = RuntimeView()
    view.replace([g, u, o, e], reversed(list(made.values())))  # listed in any order
    return view, made


STATE = mm.GetStateResponse(
    entries={
        "uid-g": mm.PodAssignments(containers={"a": blocks(0), "b": blocks(1), "i": blocks(0)})
    }
)


def test_active_pods_are_the_runtimes_with_their_containers() -> None:
    view, _ = a_view()
    assert active_pods(view, {}) == [
        mm.Pod(
            uid=uid,
            namespace="default",
            name=name,
            containers=[mm.Container(name=n) for n in names],
        )
        for uid, name, names in [
            ("uid-g", "g", ["a", "b", "c", "i", "n"]),
            ("uid-o", "o", ["app"]),
            ("uid-u", "u", ["app"]),
        ]
    ]


def test_rebuild_pins_what_numamem_holds_and_offers_the_rest_for_adoption() -> None:
    view, made = a_view()
    records, problems = rebuild(view, STATE, {})
    assert list(records) == ["uid-g"]  # the Burstable pod and the unknown layout: not ours
    record = records["uid-g"]
    assert [(e.name, e.pin, e.stopped, e.nodes) for e in record.entries.values()] == [
        ("i", Pin.PINNED, True, (0,)),
        ("a", Pin.PINNED, False, (0,)),
        ("b", Pin.PINNED, False, (1,)),
        ("c", Pin.UNKNOWN, False, ()),
        ("n", Pin.UNKNOWN, False, ()),
    ]
    assert [(p.kind, p.pod_uid) for p in problems] == [("unknown_cgroup_layout", "uid-o")]
    assert [e.name for e in adoption_candidates(record)] == ["c"]  # n: no CPU limit
    assert mems_updates(view, records) == [
        api.ContainerUpdate(
            container_id=made["b"].id,
            linux=api.LinuxContainerUpdate(
                resources=api.LinuxResources(cpu=api.LinuxCPU(mems="1"))
            ),
        )
    ]


def test_rebuild_keeps_what_the_plugin_knew_of_the_same_instance() -> None:
    view, made = a_view()
    old = PodRecord(records_identity := rebuild(view, STATE, {})[0]["uid-g"].identity)
    old.entries["i"] = Entry("i", made["i"].id, Limits(100, GI), stopped=True, init=True)
    old.entries["c"] = Entry("c", made["c"].id, Limits(100, GI), pin=Pin.LEFT_ALONE, note="why")
    old.entries["a"] = Entry("a", "an-older-id", Limits(100, GI), id_recorded=True)
    records, _ = rebuild(view, STATE, {"uid-g": old})
    new = records["uid-g"]
    assert new.identity == records_identity
    assert new.entries["i"].init is True
    assert (new.entries["c"].pin, new.entries["c"].note) == (Pin.LEFT_ALONE, "why")
    assert new.entries["a"].id_recorded is False  # another instance: its id is told again
    assert adoption_candidates(new) == []


def test_the_view_follows_the_events() -> None:
    view, made = a_view()
    g = view.sandbox("sb-g")
    assert g is not None
    assert [c.name for c in view.pods()["uid-g"].containers] == ["i", "a", "b", "c", "n"]
    view.stop(made["a"].id)
    assert view.is_stopped(made["a"].id)
    view.remove_container(made["a"].id)
    assert view.container(made["a"].id) is None
    # The kubelet re-creates the pod in a new sandbox: the pod is that sandbox's.
    g2 = obj.pod("g", "uid-g", sandbox_id="sb-g2")
    view.add_container(obj.container(g2, "i", memory_limit=GI, cpu_milli=100), g2)
    assert view.pods()["uid-g"].sandbox.id == "sb-g2"
    assert [c.name for c in view.pods()["uid-g"].containers] == ["i"]
    assert sorted(view.pods()["uid-g"].names) == ["b", "c", "i", "n"]  # both sandboxes'
    view.remove_pod("sb-g")
    assert sorted(view.pods()["uid-g"].names) == ["i"]
    view.set_mems(made["b"].id, "1")  # removed with its sandbox: nothing to set
    assert view.container(made["b"].id) is None


def test_rebuilding_checks_its_deadline_as_it_goes() -> None:
    """A Synchronize counts the plugin's own work against the runtime's deadline: rebuild
    calls its ``check`` every CHECK_EVERY pods, and a check that raises stops it."""
    from numamem.nri.reconcile import CHECK_EVERY
    from numamem.nri.view import RuntimeView

    view = RuntimeView()
    pods = [obj.pod(f"p{i}", f"uid-{i}") for i in range(2 * CHECK_EVERY + 1)]
    view.replace(pods, [obj.container(p, "a", memory_limit=GI, cpu_milli=100) for p in pods])
    calls: list[int] = []
    records, _ = rebuild(view, mm.GetStateResponse(), {}, check=lambda: calls.append(1))
    assert len(records) == len(pods) and len(calls) == 2

    def late() -> None:
        raise TimeoutError("no time left")

    with pytest.raises(TimeoutError):
        rebuild(view, mm.GetStateResponse(), {}, check=late)
