"""Error replies reach a client with gRPC's default settings, with their real status.

Issue 31: a validation error that copied a 64 KiB field into its message made a
~65 KiB ``grpc-message`` trailer; a default client (16 KiB hard limit) then saw
``RESOURCE_EXHAUSTED "Stream removed (received metadata size exceeds hard
limit ...)"`` instead. Each request of the issue's table goes to the real
daemon over ``grpc.insecure_channel`` with no options and must get its real
status, a message within ``errors.MAX_MESSAGE_BYTES`` that names the field and
shortens the value, and (on the main socket) an intact ErrorInfo.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message import Message

from numamem.testing.daemon import short_tmpdir
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from numamem.v1 import podresources_pb2 as pr
from tests.fuzz.catalogue import BY_PATH
from tests.fuzz.run import Campaign, Client, reply_problems
from tests.tables import named_rows

pytestmark = pytest.mark.e2e

A = "a" * 65536
WIDE = "🙂" * 1024  # under the 1,024-character cap; 4 KiB of UTF-8, 12 KiB percent-encoded
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND

_APP = mm.Container(name="app", requests={"memory": "1Gi"}, limits={"memory": "1Gi"})


def _pod(**fields: object) -> mm.Pod:
    return mm.Pod(uid="u1", containers=[_APP], **fields)  # type: ignore[arg-type]


_SIDECAR = mm.Container(name="init", restart_policy=A)
_BAD_APP = mm.Container(name="app", restart_policy=A)

TABLE: list[tuple[str, str, Message, grpc.StatusCode, str]] = [
    # The table: 'a' * 65536 in the field named.
    (
        "listcontainers",
        "MetaReader/ListContainers",
        mc.ListContainersRequest(pod_uid=A),
        NOT_FOUND,
        "pod 'aaa",
    ),
    (
        "setpoolinfo",
        "MetaWriter/SetPoolInfo",
        mc.SetPoolInfoRequest(pool_name="p", info=mc.PoolInfo(pool_name=A)),
        INVALID,
        "info.pool_name",
    ),
    (
        "addcontainer",
        "MetaWriter/AddContainer",
        mc.AddContainerInfoRequest(
            pod_uid="p", container_name="c", info=mc.ContainerInfo(pod_uid=A)
        ),
        INVALID,
        "info.pod_uid",
    ),
    (
        "setregioninfo",
        "MetaWriter/SetRegionInfo",
        mc.SetRegionInfoRequest(region_name="r", info=mc.RegionInfo(region_name=A)),
        INVALID,
        "info.region_name",
    ),
    *(
        (
            f"{rpc.lower()}-{where}",
            f"MemoryManager/{rpc}",
            request,
            INVALID,
            field,
        )
        for rpc, cls in (("Allocate", mm.AllocateRequest), ("Explain", mm.ExplainRequest))
        for where, request, field in (
            ("qos", cls(pod=_pod(qos_class=A)), "pod.qos_class"),
            (
                "restart",
                cls(pod=mm.Pod(uid="u1", containers=[_BAD_APP])),
                "pod.containers[0].restart_policy",
            ),
            (
                "init-restart",
                cls(pod=mm.Pod(uid="u1", init_containers=[_SIDECAR], containers=[_APP])),
                "pod.init_containers[0].restart_policy",
            ),
        )
    ),
    (
        "podresources-get",
        "PodResourcesLister/Get",
        pr.GetPodResourcesRequest(pod_name=A),
        NOT_FOUND,
        "pod aaa",
    ),
    # The same symptom seen during the campaign.
    (
        "setcontainerinfo",
        "MetaWriter/SetContainerInfo",
        mc.SetContainerInfoRequest(
            pod_uid="p", container_name="c", info=mc.ContainerInfo(container_name=A)
        ),
        INVALID,
        "info.container_name",
    ),
    (
        "updatecontainers",
        "MetaWriter/UpdateContainers",
        mc.UpdateContainersRequest(
            updates=[
                mc.ContainerUpdate(
                    pod_uid="p", container_name="c", info=mc.ContainerInfo(pod_uid=A)
                )
            ]
        ),
        INVALID,
        "updates[0].info.pod_uid",
    ),
    (
        "setregionentries",
        "MetaWriter/SetRegionEntries",
        mc.SetRegionEntriesRequest(entries={"r": mc.RegionInfo(region_name=A)}),
        INVALID,
        "entries['r'].region_name",
    ),
    # About 6 KB messages from unicode under the 1,024-character cap.
    (
        "getcontainerinfo-wide",
        "MetaReader/GetContainerInfo",
        mc.GetContainerInfoRequest(pod_uid=WIDE, container_name=WIDE),
        NOT_FOUND,
        "(1024 characters)",
    ),
    (
        "getcontainermetric-wide",
        "MetaReader/GetContainerMetric",
        mc.GetContainerMetricRequest(pod_uid=WIDE, container_name=WIDE, metric_name=WIDE),
        NOT_FOUND,
        "(1024 characters)",
    ),
    (
        "getregioninfo-wide",
        "MetaReader/GetRegionInfo",
        mc.GetRegionInfoRequest(region_name=WIDE),
        NOT_FOUND,
        "(1024 characters)",
    ),
    # A cpulist with 5000 digits: int() raised ValueError, INTERNAL before.
    (
        "pool-cpulist-digits",
        "MetaWriter/SetPoolInfo",
        mc.SetPoolInfoRequest(
            pool_name="p", info=mc.PoolInfo(topology_aware_assignments={0: "1" * 5000})
        ),
        INVALID,
        "info.topology_aware_assignments[0]: invalid cpulist",
    ),
    (
        "region-cpulist-digits",
        "MetaWriter/SetRegionInfo",
        mc.SetRegionInfoRequest(region_name="r", info=mc.RegionInfo(binding_numas="1" * 5000)),
        INVALID,
        "info.binding_numas: invalid cpulist",
    ),
]

SHORT = 600
"""The messages of the table quote at most a prefix of each value: a few hundred bytes."""


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    root = short_tmpdir("er")
    campaign = Campaign(root, seed=0)
    campaign.start()
    assert campaign.client is not None
    yield campaign.client
    campaign.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(("short", "request_msg", "code", "names"), named_rows(TABLE))
def test_the_real_status_with_a_short_message_on_a_default_client(
    client: Client, short: str, request_msg: Message, code: grpc.StatusCode, names: str
) -> None:
    rpc = next(r for r in BY_PATH.values() if r.short == short)
    outcome = client.call(rpc, request_msg)
    assert outcome.code == code, outcome.details[:300]
    assert reply_problems(rpc, request_msg, outcome) == []
    assert len(outcome.details.encode()) < SHORT, outcome.details
    assert names in outcome.details, outcome.details
    if A in str(request_msg):
        assert "(65536 characters)" in outcome.details, outcome.details
