"""The plugin's record of a pod's containers: kinds from the runtime's events, and the pod it
admits (numamem.nri.podrecord), as literals."""

from __future__ import annotations

import pytest

from numamem.nri.kube import Limits, PodIdentity
from numamem.nri.podrecord import Kind, Pin, PodRecord
from numamem.v1 import memorymanager_pb2 as mm

GI = 1 << 30
LIMITS = Limits(1000, GI)
WHO = PodIdentity("uid-1", "web", "shop", "sb-1")


def play(events: str) -> PodRecord:
    """A record after ``events``: ``+name`` created (and pinned), ``-name`` stopped,
    ``xname`` freed by the daemon (released)."""
    record = PodRecord(WHO)
    for event in events.split():
        op, name = event[0], event[1:]
        if op == "+":
            entry = record.created(name, f"id-{name}-{len(record.entries)}", LIMITS)
            entry.pin = Pin.PINNED
        elif op == "-":
            record.stopped(record.entries[name].container_id)
        elif op == "x":
            record.entries[name].pin = Pin.RELEASED
        else:
            raise AssertionError(event)
    return record


# events -> each name's kind, as far as the runtime's order tells
KINDS = [
    ("+a", {"a": Kind.LONG_RUNNING}),
    ("+a -a", {"a": Kind.LONG_RUNNING}),  # stopped, but nothing followed: not known yet
    # (also an app container that stopped before the next one was created: a documented
    # limit, it looks like a finished init container)
    ("+a -a +b", {"a": Kind.INIT, "b": Kind.LONG_RUNNING}),
    (
        "+i1 -i1 +i2 -i2 +c1 +c2",
        {"i1": Kind.INIT, "i2": Kind.INIT, "c1": Kind.LONG_RUNNING, "c2": Kind.LONG_RUNNING},
    ),
    # a running container followed by a regular init container is a sidecar
    ("+s +i -i +c", {"s": Kind.SIDECAR, "i": Kind.INIT, "c": Kind.LONG_RUNNING}),
    (
        "+i1 -i1 +s +i2 -i2 +c",
        {"i1": Kind.INIT, "s": Kind.SIDECAR, "i2": Kind.INIT, "c": Kind.LONG_RUNNING},
    ),
    # sidecars and app containers after the last init container cannot be told apart
    ("+s1 +s2 +c", {"s1": Kind.LONG_RUNNING, "s2": Kind.LONG_RUNNING, "c": Kind.LONG_RUNNING}),
    # an init container stays one when it is re-created (a new sandbox), and a crashed app
    # container that is re-created before another name is created stays long-running
    ("+i -i +c -i +i", {"i": Kind.INIT, "c": Kind.LONG_RUNNING}),
    ("+i -i +c -c +c", {"i": Kind.INIT, "c": Kind.LONG_RUNNING}),
]


@pytest.mark.parametrize(("events", "kinds"), KINDS)
def test_kinds_from_the_order_of_events(events: str, kinds: dict[str, Kind]) -> None:
    assert play(events).kinds() == kinds


def names(containers: object) -> list[tuple[str, str]]:
    return [(c.name, c.restart_policy) for c in containers]  # type: ignore[attr-defined]


# events, the new container -> (init_containers, containers) of the pod admitted for it
ADMITTED = [
    ("+a", "a", ([], [("a", "")])),
    ("+i -i +c", "c", ([("i", "")], [("c", "")])),
    # freed init containers are never listed again: an admission must not re-allocate them
    ("+i1 -i1 +i2 xi1 -i2 +c", "c", ([("i2", "")], [("c", "")])),
    ("+s +i -i +c", "c", ([("s", "Always"), ("i", "")], [("c", "")])),
    ("+c1 +c2", "c2", ([], [("c1", ""), ("c2", "")])),
    # a re-created container keeps its place
    ("+i -i +c -c +c", "c", ([("i", "")], [("c", "")])),
]


@pytest.mark.parametrize(("events", "new", "expected"), ADMITTED)
def test_the_pod_admitted_for_a_new_container(
    events: str, new: str, expected: tuple[list[tuple[str, str]], list[tuple[str, str]]]
) -> None:
    pod = play(events).admission_pod(new)
    assert (names(pod.init_containers), names(pod.containers)) == expected
    assert (pod.uid, pod.namespace, pod.name) == ("uid-1", "shop", "web")


def test_the_admitted_pod_as_a_literal() -> None:
    record = play("+i -i")
    record.created("c", "id-c", Limits(500, 2 * GI, (("hugepages-2Mi", 4 << 20),)))
    c = {"cpu": "500m", "memory": str(2 * GI), "hugepages-2Mi": str(4 << 20)}
    i = {"cpu": "1000m", "memory": str(GI)}
    assert record.admission_pod("c") == mm.Pod(
        uid="uid-1",
        namespace="shop",
        name="web",
        init_containers=[mm.Container(name="i", requests=i, limits=i)],
        containers=[mm.Container(name="c", requests=c, limits=c)],
    )


def test_only_what_numamem_holds_is_listed_besides_the_new_ones() -> None:
    record = play("+a +b")
    record.entries["a"].pin = Pin.LEFT_ALONE  # started unpinned
    record.created("c", "id-c", LIMITS)
    assert names(record.admission_pod("c").containers) == [("b", ""), ("c", "")]
    record.entries["b"].pin = Pin.UNKNOWN  # not held: a candidate for adoption
    assert names(record.admission_pod("b", "c").containers) == [("b", ""), ("c", "")]
    assert record.admission_pod() == mm.Pod(uid="uid-1", namespace="shop", name="web")


@pytest.mark.parametrize(
    ("events", "added", "freed"),
    [
        ("+i1 -i1 +i2", "i2", ["i1"]),  # the kubelet's AddContainer frees earlier inits
        ("+s +i -i +c", "c", ["i"]),  # never a sidecar
        ("+i -i +s", "s", ["i"]),
        ("+a +b", "b", []),
    ],
)
def test_what_recording_a_container_frees(events: str, added: str, freed: list[str]) -> None:
    record = play(events)
    assert record.freed_by(record.admission_pod(added), added) == freed


def test_only_the_newest_instances_removal_releases_its_name() -> None:
    record = play("+c")
    first = record.entries["c"].container_id
    record.stopped(first)
    record.created("c", "id-c-again", LIMITS)
    assert record.by_id(first) is record.entries["c"]
    record.stopped(first)  # an older instance's stop changes nothing
    assert record.entries["c"].stopped is False
    entry, newest = record.removed(first)
    assert (entry is record.entries["c"], newest) == (True, False)
    entry, newest = record.removed("id-c-again")
    assert newest and entry is not None and "c" not in record.entries
    assert record.removed("unknown") == (None, False)


def test_a_new_sandbox_restarts_the_containers_without_making_them_init_containers() -> None:
    record = play("+i -i +a +b")
    record.stopped(record.entries["a"].container_id)  # stopped with the old sandbox
    record.stopped(record.entries["b"].container_id)
    record.new_sandbox(PodIdentity("uid-1", "web", "shop", "sb-2"))
    record.created("a", "id-a-new", LIMITS)  # re-created: not a new name
    assert record.kinds() == {"i": Kind.INIT, "a": Kind.LONG_RUNNING, "b": Kind.LONG_RUNNING}
    assert record.identity.sandbox_id == "sb-2"


def test_a_released_name_re_created_in_its_sandbox_was_never_an_init_container() -> None:
    """An app container that exited before its pod's next container was created looks like
    a finished init container and is freed; the kubelet re-creates it in the same sandbox
    (restartCount > 0), which it never does for a regular init container that succeeded: it
    is long-running again and to be admitted again. In a new sandbox a re-created init
    container stays released (it runs unpinned, as under the kubelet)."""
    record = PodRecord(WHO)
    record.created("a", "id-a", LIMITS, sandbox_id="sb-1", restart_count=0).pin = Pin.PINNED
    record.stopped("id-a")
    record.created("b", "id-b", LIMITS, sandbox_id="sb-1", restart_count=0).pin = Pin.PINNED
    assert record.kinds()["a"] is Kind.INIT
    record.entries["a"].pin = Pin.RELEASED  # freed by b's AddContainer
    again = record.created("a", "id-a2", LIMITS, sandbox_id="sb-1", restart_count=1)
    assert (again.pin, again.init) == (Pin.UNKNOWN, False)
    assert record.kinds() == {"a": Kind.LONG_RUNNING, "b": Kind.LONG_RUNNING}
    assert [c.name for c in record.admission_pod("a").containers] == ["a", "b"]

    other = PodRecord(WHO)
    other.created("i", "id-i", LIMITS, sandbox_id="sb-1", restart_count=0).pin = Pin.PINNED
    other.stopped("id-i")
    other.created("c", "id-c", LIMITS, sandbox_id="sb-1", restart_count=0).pin = Pin.PINNED
    other.entries["i"].pin = Pin.RELEASED
    other.new_sandbox(PodIdentity("uid-1", "web", "shop", "sb-2"))
    rerun = other.created("i", "id-i2", LIMITS, sandbox_id="sb-2", restart_count=1)
    assert (rerun.pin, rerun.init) == (Pin.RELEASED, True)


def test_a_restart_of_a_name_never_seen_tells_nothing_of_the_order() -> None:
    """After a plugin restart the record knows only what the runtime listed: a container
    created with restartCount > 0 under a name it never saw is a restart, not the pod's next
    container in the kubelet's order, so it makes no stopped container an init container."""
    record = PodRecord(WHO)
    record.created("a", "id-a", LIMITS, sandbox_id="sb-1", restart_count=0)
    record.stopped("id-a")
    record.created("b", "id-b", LIMITS, sandbox_id="sb-1", restart_count=3)
    assert record.kinds()["a"] is Kind.LONG_RUNNING
    record.created("c", "id-c", LIMITS, sandbox_id="sb-1", restart_count=0)  # a new name
    assert record.kinds()["a"] is Kind.INIT


def test_a_kept_exited_container_is_found_by_name_when_removed() -> None:
    """A name kept at a Synchronize that listed no instance of it (id "") is removed by the
    removal of a container of that name the record does not know; a known id is not."""
    record = play("+c")
    record.entries["k"] = record.entries.pop("c")
    record.entries["k"].name, record.entries["k"].container_id = "k", ""
    assert record.removed("id-other", "c") == (None, False)
    entry, newest = record.removed("id-real", "k")
    assert newest and entry is not None and record.entries == {}
