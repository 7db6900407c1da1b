"""Every message, field and enum of ``proto/numamem/nriapi`` is upstream's: name, number, type.

The tables below were written from the upstream sources, read at:

* containerd/nri ``pkg/api/api.proto`` at commit 05777497e3dd891bd212705866a0bf68695bc169
  (package ``nri.pkg.api.v1alpha1``; the wire schema containerd 1.7 and 2.x speak:
  protobuf field numbers are never reused upstream, newer versions only add fields);
* containerd/ttrpc ``request.pb.go`` at commit 0ac5158442a3410de9b1bb756cc02821a85fd78f
  (package ``ttrpc``: Request, Response, KeyValue); ``Response.status`` is a
  ``google.rpc.Status``, checked against the installed googleapis copy below.

A field added to the .proto without a line here, or a number or type that differs,
fails: check it against upstream first, then add it here with the commit read.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.rpc import status_pb2

from numamem.nriapi import api_pb2, ttrpc_pb2

UPSTREAM_API = {
    "RegisterPluginRequest": "string plugin_name = 1; string plugin_idx = 2; string NRI_version = 3",
    "UpdateContainersRequest": "repeated ContainerUpdate update = 1; repeated ContainerEviction evict = 2",
    "UpdateContainersResponse": "repeated ContainerUpdate failed = 1",
    "ConfigureRequest": (
        "string config = 1; string runtime_name = 2; string runtime_version = 3; "
        "int64 registration_timeout = 4; int64 request_timeout = 5; string NRI_version = 6"
    ),
    "ConfigureResponse": "int32 events = 2; int64 request_timeout = 3",
    "SynchronizeRequest": "repeated PodSandbox pods = 1; repeated Container containers = 2; bool more = 3",
    "SynchronizeResponse": "repeated ContainerUpdate update = 1; bool more = 2",
    "RunPodSandboxRequest": "PodSandbox pod = 1",
    "RunPodSandboxResponse": "",
    "StopPodSandboxRequest": "PodSandbox pod = 1",
    "StopPodSandboxResponse": "",
    "RemovePodSandboxRequest": "PodSandbox pod = 1",
    "RemovePodSandboxResponse": "",
    "CreateContainerRequest": "PodSandbox pod = 1; Container container = 2",
    "CreateContainerResponse": (
        "ContainerAdjustment adjust = 1; repeated ContainerUpdate update = 2; "
        "repeated ContainerEviction evict = 3"
    ),
    "UpdateContainerRequest": (
        "PodSandbox pod = 1; Container container = 2; LinuxResources linux_resources = 3"
    ),
    "UpdateContainerResponse": "repeated ContainerUpdate update = 1; repeated ContainerEviction evict = 2",
    "StopContainerRequest": "PodSandbox pod = 1; Container container = 2",
    "StopContainerResponse": "repeated ContainerUpdate update = 1",
    "RemoveContainerRequest": "PodSandbox pod = 1; Container container = 2",
    "RemoveContainerResponse": "",
    "StateChangeEvent": "Event event = 1; PodSandbox pod = 2; Container container = 3",
    "Empty": "",
    "PodSandbox": (
        "string id = 1; string name = 2; string uid = 3; string namespace = 4; map labels = 5; "
        "map annotations = 6; string runtime_handler = 7; LinuxPodSandbox linux = 8; "
        "uint32 pid = 9; repeated string ips = 10"
    ),
    "LinuxPodSandbox": (
        "LinuxResources pod_overhead = 1; LinuxResources pod_resources = 2; "
        "string cgroup_parent = 3; string cgroups_path = 4; "
        "repeated LinuxNamespace namespaces = 5; LinuxResources resources = 6"
    ),
    "Container": (
        "string id = 1; string pod_sandbox_id = 2; string name = 3; ContainerState state = 4; "
        "map labels = 5; map annotations = 6; repeated string args = 7; repeated string env = 8; "
        "LinuxContainer linux = 11; uint32 pid = 12; int64 created_at = 14; "
        "int64 started_at = 15; int64 finished_at = 16; int32 exit_code = 17; "
        "string status_reason = 18; string status_message = 19"
    ),
    "LinuxContainer": (
        "repeated LinuxNamespace namespaces = 1; LinuxResources resources = 3; "
        "OptionalInt oom_score_adj = 4; string cgroups_path = 5"
    ),
    "LinuxNamespace": "string type = 1; string path = 2",
    "LinuxResources": (
        "LinuxMemory memory = 1; LinuxCPU cpu = 2; repeated HugepageLimit hugepage_limits = 3; "
        "OptionalString blockio_class = 4; OptionalString rdt_class = 5; map unified = 6; "
        "LinuxPids pids = 8"
    ),
    "LinuxMemory": (
        "OptionalInt64 limit = 1; OptionalInt64 reservation = 2; OptionalInt64 swap = 3; "
        "OptionalInt64 kernel = 4; OptionalInt64 kernel_tcp = 5; OptionalUInt64 swappiness = 6; "
        "OptionalBool disable_oom_killer = 7; OptionalBool use_hierarchy = 8"
    ),
    "LinuxCPU": (
        "OptionalUInt64 shares = 1; OptionalInt64 quota = 2; OptionalUInt64 period = 3; "
        "OptionalInt64 realtime_runtime = 4; OptionalUInt64 realtime_period = 5; "
        "string cpus = 6; string mems = 7"
    ),
    "HugepageLimit": "string page_size = 1; uint64 limit = 2",
    "LinuxPids": "int64 limit = 1",
    "ContainerAdjustment": (
        "map annotations = 2; repeated KeyValue env = 4; LinuxContainerAdjustment linux = 6; "
        "repeated string args = 9"
    ),
    "LinuxContainerAdjustment": (
        "LinuxResources resources = 2; string cgroups_path = 3; OptionalInt oom_score_adj = 4"
    ),
    "ContainerUpdate": (
        "string container_id = 1; LinuxContainerUpdate linux = 2; bool ignore_failure = 3"
    ),
    "LinuxContainerUpdate": "LinuxResources resources = 1",
    "ContainerEviction": "string container_id = 1; string reason = 2",
    "KeyValue": "string key = 1; string value = 2",
    "OptionalString": "string value = 1",
    "OptionalInt": "int64 value = 1",
    "OptionalInt32": "int32 value = 1",
    "OptionalUInt32": "uint32 value = 1",
    "OptionalInt64": "int64 value = 1",
    "OptionalUInt64": "uint64 value = 1",
    "OptionalBool": "bool value = 1",
}

UPSTREAM_ENUMS = {
    "Event": (
        "UNKNOWN = 0; RUN_POD_SANDBOX = 1; STOP_POD_SANDBOX = 2; REMOVE_POD_SANDBOX = 3; "
        "CREATE_CONTAINER = 4; POST_CREATE_CONTAINER = 5; START_CONTAINER = 6; "
        "POST_START_CONTAINER = 7; UPDATE_CONTAINER = 8; POST_UPDATE_CONTAINER = 9; "
        "STOP_CONTAINER = 10; REMOVE_CONTAINER = 11; UPDATE_POD_SANDBOX = 12; "
        "POST_UPDATE_POD_SANDBOX = 13; VALIDATE_CONTAINER_ADJUSTMENT = 14; LAST = 15"
    ),
    "ContainerState": (
        "CONTAINER_UNKNOWN = 0; CONTAINER_CREATED = 1; CONTAINER_PAUSED = 2; "
        "CONTAINER_RUNNING = 3; CONTAINER_STOPPED = 4"
    ),
}

UPSTREAM_SERVICES = {
    "Runtime": (
        "RegisterPlugin(RegisterPluginRequest) Empty; "
        "UpdateContainers(UpdateContainersRequest) UpdateContainersResponse"
    ),
    "Plugin": (
        "Configure(ConfigureRequest) ConfigureResponse; "
        "Synchronize(SynchronizeRequest) SynchronizeResponse; Shutdown(Empty) Empty; "
        "RunPodSandbox(RunPodSandboxRequest) RunPodSandboxResponse; "
        "StopPodSandbox(StopPodSandboxRequest) StopPodSandboxResponse; "
        "RemovePodSandbox(RemovePodSandboxRequest) RemovePodSandboxResponse; "
        "CreateContainer(CreateContainerRequest) CreateContainerResponse; "
        "UpdateContainer(UpdateContainerRequest) UpdateContainerResponse; "
        "StopContainer(StopContainerRequest) StopContainerResponse; "
        "RemoveContainer(RemoveContainerRequest) RemoveContainerResponse; "
        "StateChange(StateChangeEvent) Empty"
    ),
}

UPSTREAM_TTRPC = {
    "Request": (
        "string service = 1; string method = 2; bytes payload = 3; int64 timeout_nano = 4; "
        "repeated KeyValue metadata = 5"
    ),
    "Response": "Status status = 1; bytes payload = 2",
    "KeyValue": "string key = 1; string value = 2",
}

_SCALARS = {
    value: name[len("TYPE_") :].lower()
    for name, value in vars(FieldDescriptor).items()
    if name.startswith("TYPE_")
}


def _field(f: FieldDescriptor) -> str:
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        return f"map {f.name} = {f.number}"
    kind = (f.message_type or f.enum_type).name if f.type in (11, 14) else _SCALARS[f.type]
    repeated = "repeated " if f.is_repeated else ""
    return f"{repeated}{kind} {f.name} = {f.number}"


def _render(message: Descriptor) -> str:
    return "; ".join(_field(f) for f in message.fields)


def test_package_is_upstreams() -> None:
    assert api_pb2.DESCRIPTOR.package == "nri.pkg.api.v1alpha1"
    assert ttrpc_pb2.DESCRIPTOR.package == "ttrpc"


def test_every_message_is_upstreams() -> None:
    ours = {name: _render(m) for name, m in api_pb2.DESCRIPTOR.message_types_by_name.items()}
    assert ours == UPSTREAM_API


def test_map_fields_are_string_to_string() -> None:
    for message in api_pb2.DESCRIPTOR.message_types_by_name.values():
        for f in message.fields:
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                key, value = f.message_type.fields
                assert (key.type, value.type) == (9, 9), f"{message.name}.{f.name}"


def test_every_enum_is_upstreams() -> None:
    ours = {
        name: "; ".join(f"{v.name} = {v.number}" for v in e.values)
        for name, e in api_pb2.DESCRIPTOR.enum_types_by_name.items()
    }
    assert ours == UPSTREAM_ENUMS


def test_services_are_upstreams() -> None:
    ours = {
        name: "; ".join(
            f"{m.name}({m.input_type.name}) {m.output_type.name}" for m in service.methods
        )
        for name, service in api_pb2.DESCRIPTOR.services_by_name.items()
    }
    assert ours == UPSTREAM_SERVICES


def test_ttrpc_envelope_is_upstreams() -> None:
    ours = {name: _render(m) for name, m in ttrpc_pb2.DESCRIPTOR.message_types_by_name.items()}
    status = ours.pop("Status")
    assert ours == UPSTREAM_TTRPC
    assert status == _render(status_pb2.Status.DESCRIPTOR)
    assert status == "int32 code = 1; string message = 2; repeated Any details = 3"


def test_the_wire_matches_google_rpc_status() -> None:
    """A status we encode decodes as google.rpc.Status, and back."""
    ours = ttrpc_pb2.Status(code=12, message="method X")
    theirs = status_pb2.Status.FromString(ours.SerializeToString())
    assert (theirs.code, theirs.message) == (12, "method X")
    assert ttrpc_pb2.Status.FromString(theirs.SerializeToString()) == ours
