"""The podresources API's parts: the kubelet's rate limit, the merge with the kubelet's answers,
and pod names kept durably beside the container map."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from numamem.api.podlisting import memory_to_proto, merge_lists, merge_pod, own_pods
from numamem.api.podresources import PodResourcesComponent, PodResourcesServicer
from numamem.api.ratelimit import TokenBucket
from numamem.checkpoint.containerfile import decode_container_file, encode_containers
from numamem.checkpoint.fnv import fnv1a_32
from numamem.checkpoint.mmstore import CONTAINERS_FILE, KubeletStateStore
from numamem.checkpoint.namesfile import NAMES_FILE, encode_names, read_names
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.store import InMemoryStore, StateStore
from numamem.memtypes import Block
from numamem.pod import Pod
from numamem.topologymanager.policy import new_policy
from numamem.v1 import podresources_pb2 as pr
from tests.unit.test_memorymanager import GI, MI, ctr, two_nodes


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_gives_the_burst_then_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(100, 10, clock)
    assert [bucket.allow() for _ in range(12)] == [True] * 10 + [False] * 2
    clock.now += 0.0501  # 5 tokens at 100/s
    assert [bucket.allow() for _ in range(6)] == [True] * 5 + [False]
    clock.now += 60  # never more than the burst
    assert sum(bucket.allow() for _ in range(20)) == 10


def test_memory_blocks_as_the_kubelet_converts_them_zero_size_left_out() -> None:
    blocks = [Block((0, 1), "memory", 2 * GI), Block((1,), "hugepages-1Gi", 0), Block(None, "x", 5)]
    out = memory_to_proto(blocks)
    assert [(m.memory_type, m.size, [n.ID for n in m.topology.nodes]) for m in out] == [
        ("memory", 2 * GI, [0, 1]),
        ("x", 5, []),
    ]


def kubelet_pod(name: str, namespace: str, *containers: str) -> pr.PodResources:
    return pr.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pr.ContainerResources(
                name=c,
                cpu_ids=[1, 2],
                memory=[pr.ContainerMemory(memory_type="memory", size=7)],
            )
            for c in containers
        ],
    )


def test_merge_keeps_the_kubelets_pods_and_resources_with_numamems_memory() -> None:
    ours = [
        pr.PodResources(
            name="web",
            namespace="shop",
            containers=[
                pr.ContainerResources(name="app", memory=memory_to_proto([Block((0,), "memory", GI)])),
                pr.ContainerResources(name="extra", memory=memory_to_proto([Block((1,), "memory", MI)])),
            ],
        ),
        pr.PodResources(name="batch", namespace="jobs"),
    ]  # fmt: skip
    theirs = [kubelet_pod("proxy", "kube-system", "p"), kubelet_pod("web", "shop", "app", "log")]
    merged = merge_lists(theirs, ours)
    assert [(p.namespace, p.name) for p in merged] == [
        ("kube-system", "proxy"),
        ("shop", "web"),
        ("jobs", "batch"),
    ]
    assert merged[0] == theirs[0]  # a pod numamem does not manage: the kubelet's, untouched
    web = {c.name: c for c in merged[1].containers}
    # The kubelet's containers are the pod's; numamem's "extra" (a regular init container
    # still holding memory) is not one the kubelet would list.
    assert list(web) == ["app", "log"]
    assert [m.size for m in web["app"].memory] == [GI] and list(web["app"].cpu_ids) == [1, 2]
    assert list(web["log"].memory) == [] and list(web["log"].cpu_ids) == [1, 2]
    assert [m.size for m in theirs[1].containers[0].memory] == [7]  # inputs are not changed
    assert merge_pod(theirs[1], ours[0]) == merged[1]


def named_manager(store: StateStore, *, record: bool = True) -> Manager:
    machine = two_nodes()
    m = Manager(
        StaticPolicy(machine, {0: {"memory": 512 * MI}}),
        store,
        new_policy("single-numa-node", machine)[0],
        "container",
        record_pod_names=record,
    )
    m.start()
    return m


def test_names_are_recorded_with_state_and_dropped_with_it(tmp_path: Path) -> None:
    m = named_manager(KubeletStateStore(tmp_path))
    assert m.admit(Pod("u1", "shop", "web-0", containers=(ctr("a", GI),))).result.admitted
    assert m.admit(Pod("u2", "shop", "db-0", containers=(ctr("a", GI),))).result.admitted
    assert m.admit(Pod("u3", containers=(ctr("a", GI),))).result.admitted  # no names given
    assert m.pod_names() == {"u1": ("shop", "web-0"), "u2": ("shop", "db-0")}
    filed = read_names((tmp_path / NAMES_FILE).read_bytes(), tmp_path / NAMES_FILE).names
    assert filed == {"u1": ("shop", "web-0"), "u2": ("shop", "db-0")}
    assert [(p.namespace, p.name) for p in own_pods(m.reader(), m.pod_names())] == [
        ("", "u3"),
        ("shop", "db-0"),
        ("shop", "web-0"),
    ]
    m.release_pod("u2")
    assert m.pod_names() == {"u1": ("shop", "web-0")}
    # A restart reads them back (durable), beside the container map.
    again = named_manager(KubeletStateStore(tmp_path))
    assert again.pod_names() == {"u1": ("shop", "web-0")}
    # The released pod's name stays in the file, inert: it has no state.
    assert read_names((tmp_path / NAMES_FILE).read_bytes(), tmp_path).names == {
        "u1": ("shop", "web-0"), "u2": ("shop", "db-0")
    }  # fmt: skip


def test_names_are_not_kept_unless_asked_and_the_file_stays_as_before(tmp_path: Path) -> None:
    m = named_manager(KubeletStateStore(tmp_path), record=False)
    assert m.admit(Pod("u1", "shop", "web-0", containers=(ctr("a", GI),))).result.admitted
    m.add_container(Pod("u1", "shop", "web-0", containers=(ctr("a", GI),)), "a", "cid-1")
    assert m.pod_names() == {}
    assert (tmp_path / CONTAINERS_FILE).read_bytes() == encode_containers({"cid-1": ("u1", "a")})
    assert b'"pods"' not in encode_containers({"cid-1": ("u1", "a")}, {})


def test_a_name_written_before_a_failed_state_write_is_inert(tmp_path: Path) -> None:
    """Names follow the ids' write order: the map first, then the state. A crash between leaves
    a name without state, which the next start drops."""
    (tmp_path / NAMES_FILE).write_bytes(encode_names({"ghost": ("ns", "ghost")}))
    m = named_manager(KubeletStateStore(tmp_path))
    assert m.pod_names() == {}


def test_an_in_memory_store_keeps_the_names() -> None:
    store = InMemoryStore()
    m = named_manager(store)
    assert m.admit(Pod("u1", "a", "b", containers=(ctr("a", GI),))).result.admitted
    assert store.saved is not None and dict(store.saved.pod_names) == {"u1": ("a", "b")}


@pytest.mark.parametrize("names", [{}, {"u": ("ns", "n")}])
def test_container_file_round_trip(names: dict[str, tuple[str, str]]) -> None:
    data = encode_containers({"cid": ("u", "c")}, names)
    assert decode_container_file(data) == ({"cid": ("u", "c")}, names)


def test_list_is_built_once_per_commit() -> None:
    m = named_manager(InMemoryStore())
    servicer = PodResourcesServicer(lambda: m)
    assert m.admit(Pod("u1", "a", "one", containers=(ctr("a", GI),))).result.admitted
    first = servicer.own_pods()
    assert servicer.own_pods() is first
    assert m.admit(Pod("u2", "a", "two", containers=(ctr("a", GI),))).result.admitted
    second = servicer.own_pods()
    assert [p.name for p in second] == ["one", "two"]
    listed = servicer.List(pr.ListPodResourcesRequest(), None)  # type: ignore[arg-type]
    assert list(listed.pod_resources) == second


def get_pod(servicer: PodResourcesServicer, namespace: str, name: str) -> pr.PodResources:
    request = pr.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
    return servicer.Get(request, None).pod_resources  # type: ignore[arg-type]


def sizes(pod: pr.PodResources) -> list[int]:
    return [m.size for c in pod.containers for m in c.memory]


def test_a_recreated_pod_is_its_own_pod_and_get_answers_the_newest(tmp_path: Path) -> None:
    """Pods are uids, names are labels: a StatefulSet pod re-created with a new uid while the
    old uid still holds memory is listed twice, Get and the kubelet merge take the newest, and
    which one is newest survives a restart."""
    m = named_manager(KubeletStateStore(tmp_path))
    # "u9" sorts after "u1" and "u0" before it: the newest is not the largest or smallest uid.
    assert m.admit(Pod("u9", "shop", "web-0", containers=(ctr("a", 2 * GI),))).result.admitted
    assert m.admit(Pod("u0", "shop", "web-0", containers=(ctr("a", 1 * GI),))).result.admitted
    for manager in (m, named_manager(KubeletStateStore(tmp_path))):
        servicer = PodResourcesServicer(lambda manager=manager: manager)
        assert [(p.name, sizes(p)) for p in servicer.own_pods()] == [
            ("web-0", [2 * GI]),
            ("web-0", [1 * GI]),
        ]
        assert sizes(get_pod(servicer, "shop", "web-0")) == [1 * GI]
        merged = merge_lists([kubelet_pod("web-0", "shop", "a")], servicer.own_pods())
        # The older uid just before the newest, as standalone: keyed by name, the newest wins.
        assert [(p.name, sizes(p)) for p in merged] == [("web-0", [2 * GI]), ("web-0", [1 * GI])]
        assert list(merged[1].containers[0].cpu_ids) == [1, 2]  # the kubelet's pod, our memory
        assert {(p.namespace, p.name): sizes(p) for p in merged} == {("shop", "web-0"): [GI]}
    assert list(read_names((tmp_path / NAMES_FILE).read_bytes(), tmp_path).names) == ["u9", "u0"]
    # The old uid goes: the name is the new pod's alone.
    m.release_pod("u9")
    servicer = PodResourcesServicer(lambda: m)
    assert [(p.name, sizes(p)) for p in servicer.own_pods()] == [("web-0", [1 * GI])]


def test_a_file_without_an_order_reads_in_uid_order() -> None:
    body = {"containers": {}, "pods": {"b": ["ns", "x"], "a": ["ns", "x"]}}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    data = b'{"checksum":%d,' % fnv1a_32(canonical) + canonical[1:]
    assert list(decode_container_file(data)[1]) == ["a", "b"]


def test_list_never_pairs_a_state_with_another_commits_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A List while a commit is being published sees one commit's state and names: the view and
    the names are published as one object (before, the names went first: a List in between
    listed the released pod under its uid)."""
    import numamem.memorymanager.manager.versions as versions_module

    m = named_manager(InMemoryStore())
    assert m.admit(Pod("u1", "shop", "web-0", containers=(ctr("a", GI),))).result.admitted
    servicer = PodResourcesServicer(lambda: m)
    seen: list[list[tuple[str, str]]] = []
    real_view = versions_module.StateView

    def view_during_commit(state: object) -> object:
        seen.append([(p.namespace, p.name) for p in servicer.own_pods()])
        return real_view(state)  # type: ignore[arg-type]

    monkeypatch.setattr(versions_module, "StateView", view_during_commit)
    m.release_pod("u1")
    assert seen == [[("shop", "web-0")]]
    assert servicer.own_pods() == []


def test_regular_init_containers_are_not_listed_sidecars_are(tmp_path: Path) -> None:
    """Issue 26: List showed a regular init container with no memory. The kubelet lists app
    containers and restartable init containers only (podresources server_v1.go)."""
    m = named_manager(KubeletStateStore(tmp_path))
    pod = Pod(
        "u-1",
        "shop",
        "web",
        (ctr("init", GI), ctr("proxy", 256 * MI, sidecar=True), ctr("big-init", 3 * GI)),
        (ctr("app", 2 * GI),),
    )
    assert m.admit(pod).result.admitted
    servicer = PodResourcesServicer(lambda: m)

    def listed() -> dict[str, list[int]]:
        [web] = servicer.own_pods()
        return {c.name: [b.size for b in c.memory] for c in web.containers}

    # "init" is reused whole by "big-init" and "app"; "big-init" keeps 1Gi until the app starts.
    assert m.get_memory("u-1", "init")[0].size == 0
    assert listed() == {"app": [2 * GI], "big-init": [GI], "proxy": [256 * MI]}
    m.add_container(pod, "app", "cid-app")  # frees the earlier regular init containers
    assert listed() == {"app": [2 * GI], "proxy": [256 * MI]}
    merged = merge_pod(kubelet_pod("web", "shop", "proxy", "app"), servicer.own_pods()[0])
    assert [c.name for c in merged.containers] == ["proxy", "app"]


def raw_call(channel: grpc.Channel, method: str, payload: bytes, **kwargs: Any) -> grpc.RpcError:
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as caught:
        call(payload, timeout=10, **kwargs)
    return caught.value


@pytest.fixture
def served(short_root: Path) -> Iterator[tuple[PodResourcesComponent, grpc.Channel]]:
    """A podresources server on its own socket, as the daemon builds it."""
    m = named_manager(InMemoryStore())
    component = PodResourcesComponent(str(short_root / "pr" / "pr.sock"), lambda: m)
    component.load()
    component.start()
    try:
        with grpc.insecure_channel(f"unix://{component.socket}") as channel:
            yield component, channel
    finally:
        component.stop()


def test_undecodable_requests_are_invalid_argument_as_on_the_main_socket(
    served: tuple[PodResourcesComponent, grpc.Channel],
) -> None:
    """As the main socket (api/interceptors.py), not as grpcio: INTERNAL 'Exception
    deserializing request!' (deviation from the kubelet, whose Go gRPC answers Internal)."""
    _, channel = served
    bad_utf8 = b"\x0a\x03a\xff\xfe"  # GetPodResourcesRequest.pod_name, not UTF-8
    for method, payload in (
        ("/v1.PodResourcesLister/List", b"\xff\xff\xff"),
        ("/v1.PodResourcesLister/GetAllocatableResources", b"\x0f"),
        ("/v1.PodResourcesLister/Get", bad_utf8),
    ):
        err = raw_call(channel, method, payload)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err.details())
        assert (err.details() or "").startswith("the request does not decode: "), method
    reflection = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=None,
        response_deserializer=None,
    )
    with pytest.raises(grpc.RpcError) as caught:
        list(reflection(iter([b"\xff\xff\xff"]), timeout=10))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # The kubelet's NOT_FOUND keeps its code and text.
    missing = pr.GetPodResourcesRequest(pod_name="web", pod_namespace="ns")
    err = raw_call(channel, "/v1.PodResourcesLister/Get", missing.SerializeToString())
    assert (err.code(), err.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "pod web in namespace ns not found",
    )


def test_a_handler_bug_is_internal_with_the_request_id_as_on_the_main_socket(
    served: tuple[PodResourcesComponent, grpc.Channel],
) -> None:
    """Not UNKNOWN with the exception's text and no id to find the logged traceback by."""
    component, channel = served

    def bug() -> list[pr.PodResources]:
        raise RuntimeError("a handler bug")

    component.servicer.own_pods = bug  # type: ignore[method-assign]
    err = raw_call(
        channel, "/v1.PodResourcesLister/List", b"", metadata=(("x-request-id", "r-42"),)
    )
    assert err.code() == grpc.StatusCode.INTERNAL
    assert err.details() == "internal error (request id r-42); see daemon log"
