"""A podresources client and a fake kubelet server, generated at run time from the upstream
interface definition ``tests/data/podresources/api.proto``.

Run in a process of its own: the generated module registers the ``v1.*`` names that
numamem's own ``podresources_pb2`` registers too, and one process cannot hold both.

    python -m tests.podresources_upstream call SOCKET METHOD [REQUEST_JSON]
        prints {"response": ...} or {"code": "NOT_FOUND", "details": ...}
    python -m tests.podresources_upstream burst SOCKET N
        calls List N times at once and prints the status codes, in order
    python -m tests.podresources_upstream kubelet SOCKET FIXTURE_JSON
        serves List, GetAllocatableResources and Get from the fixture, as the kubelet
        would ({"list": ListPodResourcesResponse, "allocatable": AllocatableResourcesResponse})
        and prints "serving" once it listens
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tempfile
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

PROTO = Path(__file__).resolve().parent / "data" / "podresources" / "api.proto"


def generate() -> tuple[Any, Any]:
    """(api_pb2, api_pb2_grpc) built by protoc from the upstream file into a temp dir."""
    out = Path(tempfile.mkdtemp(prefix="podresources-upstream-"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={PROTO.parent}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO),
        ],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(out))
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")


def to_json(message: Any) -> Any:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def call(socket: str, method: str, request: str) -> dict[str, Any]:
    api, api_grpc = generate()
    kinds = {
        "List": api.ListPodResourcesRequest,
        "GetAllocatableResources": api.AllocatableResourcesRequest,
        "Get": api.GetPodResourcesRequest,
    }
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = api_grpc.PodResourcesListerStub(channel)
        message = json_format.Parse(request or "{}", kinds[method]())
        try:
            return {"response": to_json(getattr(stub, method)(message, timeout=10))}
        except grpc.RpcError as err:
            return {"code": err.code().name, "details": err.details()}


def burst(socket: str, n: int) -> list[str]:
    api, api_grpc = generate()
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = api_grpc.PodResourcesListerStub(channel)
        stub.GetAllocatableResources(api.AllocatableResourcesRequest(), timeout=10)  # connected
        calls = [stub.List.future(api.ListPodResourcesRequest(), timeout=10) for _ in range(n)]
        codes = []
        for future in calls:
            try:
                future.result()
                codes.append("OK")
            except grpc.RpcError as err:
                codes.append(f"{err.code().name}: {err.details()}")
        return codes


def kubelet(socket: str, fixture: str) -> None:
    api, api_grpc = generate()
    data = json.loads(Path(fixture).read_text())
    listed = json_format.ParseDict(data.get("list", {}), api.ListPodResourcesResponse())
    allocatable = json_format.ParseDict(
        data.get("allocatable", {}), api.AllocatableResourcesResponse()
    )

    class Kubelet(api_grpc.PodResourcesListerServicer):  # type: ignore[misc, name-defined]
        def List(self, request: Any, context: Any) -> Any:
            return listed

        def GetAllocatableResources(self, request: Any, context: Any) -> Any:
            return allocatable

        def Get(self, request: Any, context: Any) -> Any:
            for pod in listed.pod_resources:
                if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                    return api.GetPodResourcesResponse(pod_resources=pod)
            # The kubelet returns a plain error: gRPC sends it as UNKNOWN.
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
            return None

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_grpc.add_PodResourcesListerServicer_to_server(Kubelet(), server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    print("serving", flush=True)
    threading.Event().wait()


def main() -> int:
    mode, socket, *rest = sys.argv[1:]
    if mode == "call":
        print(json.dumps(call(socket, rest[0], rest[1] if len(rest) > 1 else "")))
    elif mode == "burst":
        print(json.dumps(burst(socket, int(rest[0]))))
    elif mode == "kubelet":
        kubelet(socket, rest[0])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
