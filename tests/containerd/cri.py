"""A small typed client of the CRI (``runtime.v1.RuntimeService``/``ImageService``) on a unix socket.

It sends what it is given and returns what the runtime answers: building the messages
the way the kubelet does is :mod:`tests.containerd.kubelet`'s job. Every failed call
raises :class:`CriError`, naming the method, the gRPC code and the runtime's message
(which is where an NRI plugin's refusal of a container shows up).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import grpc

from tests.containerd.criapi import api_pb2 as api
from tests.containerd.criapi import api_pb2_grpc as api_grpc

CRI_VERSION = "v1"


class CriError(Exception):
    """A CRI call failed: ``method``, the gRPC ``code`` and the runtime's ``details``."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"CRI {method} failed: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Resources:
    """``LinuxContainerResources``: 0 and "" mean "not specified", as in the CRI."""

    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit_in_bytes: int = 0
    oom_score_adj: int = 0
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    hugepage_limits: Mapping[str, int] = field(default_factory=dict)
    """page size as the CRI spells it ("2MB", "1GB") -> limit in bytes"""
    memory_swap_limit_in_bytes: int = 0

    def to_proto(self) -> api.LinuxContainerResources:
        return api.LinuxContainerResources(
            cpu_period=self.cpu_period,
            cpu_quota=self.cpu_quota,
            cpu_shares=self.cpu_shares,
            memory_limit_in_bytes=self.memory_limit_in_bytes,
            oom_score_adj=self.oom_score_adj,
            cpuset_cpus=self.cpuset_cpus,
            cpuset_mems=self.cpuset_mems,
            hugepage_limits=[
                api.HugepageLimit(page_size=size, limit=limit)
                for size, limit in sorted(self.hugepage_limits.items())
            ],
            memory_swap_limit_in_bytes=self.memory_swap_limit_in_bytes,
        )

    @classmethod
    def from_proto(cls, msg: api.LinuxContainerResources) -> Resources:
        return cls(
            cpu_period=msg.cpu_period,
            cpu_quota=msg.cpu_quota,
            cpu_shares=msg.cpu_shares,
            memory_limit_in_bytes=msg.memory_limit_in_bytes,
            oom_score_adj=msg.oom_score_adj,
            cpuset_cpus=msg.cpuset_cpus,
            cpuset_mems=msg.cpuset_mems,
            hugepage_limits={h.page_size: h.limit for h in msg.hugepage_limits},
            memory_swap_limit_in_bytes=msg.memory_swap_limit_in_bytes,
        )


@dataclass(frozen=True)
class ContainerState:
    """What ``ContainerStatus(verbose=true)`` tells of one container."""

    id: str
    name: str
    state: str
    """CONTAINER_CREATED, CONTAINER_RUNNING, CONTAINER_EXITED or CONTAINER_UNKNOWN"""
    pid: int
    """the init process's pid on the host (0 when not running)"""
    labels: dict[str, str]
    annotations: dict[str, str]
    resources: Resources | None
    """the runtime's record of the container's resources (None when it reports none)"""
    exit_code: int
    reason: str
    message: str


class CriClient:
    """A blocking CRI client on ``unix://<address>``; calls time out after ``timeout`` s.

    Not thread-safe to close while calls run; otherwise one client may be shared."""

    def __init__(self, address: Path, timeout: float = 30.0) -> None:
        self.address = address
        self.timeout = timeout
        # Reconnect within 0.5 s after a runtime restart (gRPC's default backoff grows to 2 min).
        self._channel = grpc.insecure_channel(
            f"unix://{address}",
            options=[
                ("grpc.initial_reconnect_backoff_ms", 50),
                ("grpc.min_reconnect_backoff_ms", 50),
                ("grpc.max_reconnect_backoff_ms", 500),
            ],
        )
        self._rt = api_grpc.RuntimeServiceStub(self._channel)
        self._img = api_grpc.ImageServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, stub: Any, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return getattr(stub, method)(request, timeout=timeout or self.timeout)
        except grpc.RpcError as err:
            raise CriError(method, err.code(), err.details() or "") from None

    def version(self, timeout: float | None = None) -> api.VersionResponse:
        return self._call(self._rt, "Version", api.VersionRequest(version=CRI_VERSION), timeout)  # type: ignore[no-any-return]

    def run_pod_sandbox(self, config: api.PodSandboxConfig, runtime_handler: str = "") -> str:
        request = api.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler)
        return self._call(self._rt, "RunPodSandbox", request).pod_sandbox_id  # type: ignore[no-any-return]

    def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        self._call(
            self._rt, "StopPodSandbox", api.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id)
        )

    def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        request = api.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id)
        self._call(self._rt, "RemovePodSandbox", request)

    def list_pod_sandboxes(self) -> list[api.PodSandbox]:
        return list(self._call(self._rt, "ListPodSandbox", api.ListPodSandboxRequest()).items)

    def create_container(
        self, pod_sandbox_id: str, config: api.ContainerConfig, sandbox_config: api.PodSandboxConfig
    ) -> str:
        request = api.CreateContainerRequest(
            pod_sandbox_id=pod_sandbox_id, config=config, sandbox_config=sandbox_config
        )
        return self._call(self._rt, "CreateContainer", request).container_id  # type: ignore[no-any-return]

    def start_container(self, container_id: str) -> None:
        self._call(self._rt, "StartContainer", api.StartContainerRequest(container_id=container_id))

    def stop_container(self, container_id: str, timeout: int = 0) -> None:
        """Stop with a grace period of ``timeout`` seconds (0: SIGKILL at once)."""
        request = api.StopContainerRequest(container_id=container_id, timeout=timeout)
        self._call(self._rt, "StopContainer", request, timeout=self.timeout + timeout)

    def remove_container(self, container_id: str) -> None:
        request = api.RemoveContainerRequest(container_id=container_id)
        self._call(self._rt, "RemoveContainer", request)

    def update_container_resources(
        self,
        container_id: str,
        resources: Resources,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        request = api.UpdateContainerResourcesRequest(
            container_id=container_id,
            linux=resources.to_proto(),
            annotations=dict(annotations or {}),
        )
        self._call(self._rt, "UpdateContainerResources", request)

    def list_containers(self, pod_sandbox_id: str = "") -> list[api.Container]:
        request = api.ListContainersRequest(
            filter=api.ContainerFilter(pod_sandbox_id=pod_sandbox_id)
        )
        return list(self._call(self._rt, "ListContainers", request).containers)

    def container_status(self, container_id: str) -> ContainerState:
        request = api.ContainerStatusRequest(container_id=container_id, verbose=True)
        response = self._call(self._rt, "ContainerStatus", request)
        status = response.status
        info = json.loads(response.info["info"]) if "info" in response.info else {}
        resources = (
            Resources.from_proto(status.resources.linux)
            if status.HasField("resources") and status.resources.HasField("linux")
            else None
        )
        return ContainerState(
            id=status.id,
            name=status.metadata.name,
            state=api.ContainerState.Name(status.state),
            pid=int(info.get("pid", 0)),
            labels=dict(status.labels),
            annotations=dict(status.annotations),
            resources=resources,
            exit_code=status.exit_code,
            reason=status.reason,
            message=status.message,
        )

    def runtime_spec(self, container_id: str) -> dict[str, Any]:
        """The container's OCI spec as the runtime made it (the verbose status's
        ``runtimeSpec``: the CRI's request with the NRI plugins' adjustments)."""
        request = api.ContainerStatusRequest(container_id=container_id, verbose=True)
        response = self._call(self._rt, "ContainerStatus", request)
        info = json.loads(response.info["info"]) if "info" in response.info else {}
        spec: dict[str, Any] = info.get("runtimeSpec") or {}
        return spec

    def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout: int = 10
    ) -> api.ExecSyncResponse:
        """Run ``cmd`` in the container and wait for it (at most ``timeout`` seconds)."""
        request = api.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=timeout)
        return self._call(self._rt, "ExecSync", request, timeout=self.timeout + timeout)  # type: ignore[no-any-return]

    def list_images(self) -> list[api.Image]:
        return list(self._call(self._img, "ListImages", api.ListImagesRequest()).images)
