"""The kubelet's podresources API (``v1.PodResourcesLister``) on ``--podresources-socket``.

Consumers of the kubelet's API (NFD topology-updater, the resource-topology-
exporter) read it to publish NodeResourceTopology objects; served here, they
see the NUMA memory numamem manages. Answers come from the memory manager's
committed state (no lock, no wait on a disk write):

* ``List``: every pod with memory state, named by the namespace and name of the
  Pod message that admitted or allocated it (kept durably beside the container
  map). A pod restored from a kubelet checkpoint, or admitted without them, is
  listed with its uid as name and an empty namespace. Each container's memory
  blocks are those GetMemory returns; zero-size blocks are left out, as the
  kubelet does. The kubelet lists a pod's app containers and restartable init
  containers (sidecars, before the app containers), never a regular init
  container (``server_v1.go``). The state does not say which containers are
  init containers, so numamem's own answer leaves out the containers that hold
  no memory: in a pod with state those are exactly the regular init containers
  whose memory the app containers reuse. Deviation: a regular init container
  larger than what reuses it keeps the rest until the app's AddContainer
  releases it, and is listed until then; with the kubelet's answer merged in,
  the kubelet's container list is the pod's and it is never listed.
  A pod allocated as a whole (pod-level resources, KEP-5526) has its pod-level
  memory in ``PodResources.memory`` (field 5, as the kubelet 1.37 reports it),
  and only its containers with memory of their own list memory; those sharing
  the pod's pool are listed without (``GetResourceIsolationLevel`` ``pod``).
  ``PodResources.cpu_ids`` (field 4) is the kubelet's, when merged.
* ``GetAllocatableResources``: one memory entry per NUMA node and memory type,
  as GetAllocatableMemory returns.
* ``Get``: that pod, or NOT_FOUND with the kubelet's text. (Deviation: the
  kubelet returns that text as a plain Go error, which gRPC sends as UNKNOWN;
  NOT_FOUND is what the API's clients test for.)

With ``--kubelet-podresources-socket`` every answer is the kubelet's own (its
CPU ids, devices and dynamic resources) with numamem's memory in place of the
kubelet's for the pods numamem has state for; numamem's pods the kubelet does
not list are added. When the kubelet does not answer (within
:data:`KUBELET_TIMEOUT_S`), numamem answers with its own data and logs that
at most once a minute; a call never fails because of the kubelet.

Errors: the server runs the main socket's interceptor
(:class:`~numamem.api.interceptors.ServerInterceptor`, without its readiness
gate, RPC log lines at debug): a request that does not decode as its message is
answered INVALID_ARGUMENT "the request does not decode: ..." (deviation: the
kubelet's Go gRPC answers Internal for an unmarshal error; a client's bad bytes
are not a server fault), and a handler bug INTERNAL "internal error (request id
...)" with the traceback logged under that id, never UNKNOWN with nothing to
find it by. Both carry the main socket's ErrorInfo, which the kubelet's clients
ignore.

Rate limit: the kubelet's, a token bucket of :data:`QPS` requests per second
with a burst of :data:`BURST` over the whole server; beyond it,
RESOURCE_EXHAUSTED "rejected by rate limit" (:mod:`numamem.api.ratelimit`). The
limit is this server's only: the main socket's RPCs are not counted.

The answers are built by :mod:`numamem.api.podlisting`; this module is the
servicer (the kubelet's answers asked for and merged, the warning throttle) and
the component that serves it on its own socket.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_reflection.v1alpha import reflection

from numamem.api.component import DurabilityReport
from numamem.api.interceptors import ServerInterceptor
from numamem.api.podlisting import memory_to_proto, merge_lists, merge_pod, newest_by_name, own_pods
from numamem.api.ratelimit import RateLimit, TokenBucket
from numamem.api.sockets import BoundSocket, bind_unix_socket
from numamem.api.statedir import check_dir, make_dirs
from numamem.errors import quote
from numamem.logging import get_logger
from numamem.memorymanager.manager.versions import Committed
from numamem.memorymanager.manager.writes import Manager
from numamem.socketpath import check_socket_path, prepare_socket_path
from numamem.v1 import podresources_pb2 as pr
from numamem.v1 import podresources_pb2_grpc as pr_grpc
from numamem.work import installed_courtesy

_log = get_logger("podresources")

SERVICE = pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name
QPS = 100
BURST = 10
"""The kubelet's ``podresources.DefaultQPS`` and ``DefaultBurstTokens``."""
KUBELET_TIMEOUT_S = 2.0
WARN_EVERY_S = 60.0


class PodResourcesServicer(pr_grpc.PodResourcesListerServicer):
    """``v1.PodResourcesLister`` over the memory manager, with the kubelet's answers merged in
    when ``kubelet`` is given. Holds no state of its own but the warning throttle."""

    def __init__(
        self,
        manager: Callable[[], Manager],
        kubelet: pr_grpc.PodResourcesListerStub | None = None,
        kubelet_socket: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._manager = manager
        self._kubelet = kubelet
        self._kubelet_socket = kubelet_socket
        self._clock = clock
        self._warned_at: float | None = None
        self._warn_lock = threading.Lock()
        self.courtesy = installed_courtesy()
        """What counts this service's calls for courteous searches (the daemon's, read when
        the servicer is made; :meth:`_ask_kubelet` stops counting a call while it waits)."""
        self._own: (
            tuple[Committed, list[pr.PodResources], dict[tuple[str, str], pr.PodResources]] | None
        ) = None
        """numamem's pods (and the newest of each name) with the committed version they were
        built from (state and names of one commit, published together), so a List or Get
        between commits reuses them."""

    def own_pods(self) -> list[pr.PodResources]:
        """:func:`own_pods` of the committed version, built once per commit (callers copy)."""
        return self._own_answer()[1]

    def _own_answer(
        self,
    ) -> tuple[Committed, list[pr.PodResources], dict[tuple[str, str], pr.PodResources]]:
        committed = self._manager().committed()
        cached = self._own
        if cached is not None and cached[0] is committed:
            return cached
        pods = own_pods(committed.view, committed.names)
        answer = (committed, pods, newest_by_name(pods))
        self._own = answer
        return answer

    def _ask_kubelet(self, method: str, request: Any) -> Any:
        """The kubelet's answer, or None when it did not give one (logged once a minute).
        A NOT_FOUND from ``Get`` is an answer: raised as the RpcError."""
        if self._kubelet is None:
            return None
        courtesy = self.courtesy
        try:
            # Waiting for the kubelet needs no interpreter lock: searches need not give way.
            with courtesy.idle() if courtesy is not None else contextlib.nullcontext():
                return getattr(self._kubelet, method)(request, timeout=KUBELET_TIMEOUT_S)
        except grpc.RpcError as err:
            if method == "Get" and err.code() in (
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.UNKNOWN,
            ):
                raise
            self._warn(method, err)
            return None

    def _warn(self, method: str, err: grpc.RpcError) -> None:
        now = self._clock()
        with self._warn_lock:
            if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
                return
            self._warned_at = now
        _log.warning(
            "the kubelet's podresources API did not answer; numamem answers with its own data "
            "(memory only) and says so at most once a minute",
            method=method,
            socket=self._kubelet_socket,
            code=str(err.code()),
            error=err.details(),
        )

    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        ours = self.own_pods()
        theirs = self._ask_kubelet("List", pr.ListPodResourcesRequest())
        pods = ours if theirs is None else merge_lists(theirs.pod_resources, ours)
        return pr.ListPodResourcesResponse(pod_resources=pods)

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        memory = memory_to_proto(self._manager().get_allocatable_memory())
        theirs = self._ask_kubelet("GetAllocatableResources", pr.AllocatableResourcesRequest())
        if theirs is None:
            return pr.AllocatableResourcesResponse(memory=memory)
        return pr.AllocatableResourcesResponse(
            devices=theirs.devices, cpu_ids=theirs.cpu_ids, memory=memory
        )

    def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        own = self._own_answer()[2].get((request.pod_namespace, request.pod_name))
        try:
            theirs = self._ask_kubelet("Get", request)
        except grpc.RpcError:
            theirs = None  # the kubelet does not know the pod: numamem may
        if theirs is not None and theirs.HasField("pod_resources"):
            pod = theirs.pod_resources if own is None else merge_pod(theirs.pod_resources, own)
            return pr.GetPodResourcesResponse(pod_resources=pod)
        if own is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {quote(request.pod_name, style='bare')} in namespace "
                f"{quote(request.pod_namespace, style='bare')} not found",
            )
        return pr.GetPodResourcesResponse(pod_resources=own)


# --- the component ------------------------------------------------------------------


class PodResourcesComponent:
    """Its own gRPC server on ``socket`` (0660 in a 0750 directory, as the main socket),
    bound in :meth:`load` so that a bad path refuses the start; nothing on the main socket."""

    service_names: Sequence[str] = ()

    def __init__(
        self,
        socket: str,
        manager: Callable[[], Manager],
        kubelet_socket: str | None = None,
        *,
        allow_shared_dirs: bool = False,
        rate: float = QPS,
        burst: int = BURST,
    ) -> None:
        self.socket = socket
        self._allow_shared = allow_shared_dirs
        self._channel = (
            None if kubelet_socket is None else grpc.insecure_channel(f"unix://{kubelet_socket}")
        )
        stub = None if self._channel is None else pr_grpc.PodResourcesListerStub(self._channel)
        self.servicer = PodResourcesServicer(manager, stub, kubelet_socket)
        self.bucket = TokenBucket(rate, burst)
        self._server: grpc.Server | None = None
        self._bound: BoundSocket | None = None
        self._created: list[Path] = []

    def register(self, server: grpc.Server) -> None:
        return None

    def watch_durability(self, report: DurabilityReport) -> None:
        return None

    def load(self) -> None:
        directory = Path(self.socket).parent
        check_socket_path(self.socket, "--podresources-socket")
        check_dir(directory, "--podresources-socket directory", self._allow_shared)
        self._created += make_dirs(directory, 0o750, "--podresources-socket directory")
        prepare_socket_path(self.socket, "--podresources-socket")
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="podresources"),
            interceptors=[
                RateLimit(self.bucket),
                ServerInterceptor(None, log_rpcs=False, courtesy=self.servicer.courtesy),
            ],
        )
        pr_grpc.add_PodResourcesListerServicer_to_server(self.servicer, server)
        reflection.enable_server_reflection((SERVICE, reflection.SERVICE_NAME), server)
        self._bound = bind_unix_socket(server, self.socket, "--podresources-socket")
        self._server = server

    def start(self) -> None:
        if self._server is not None:
            self._server.start()
            _log.info("podresources API listening", socket=self.socket)

    def stop(self) -> None:
        """Stop serving, remove the socket (only while it is the one this component bound)
        and the directories this start made (if empty)."""
        if self._server is not None:
            self._server.stop(1).wait()
            self._server = None
        if self._bound is not None:
            self._bound.remove()
            self._bound = None
        for path in reversed(self._created):
            with contextlib.suppress(OSError):
                path.rmdir()
        self._created = []
        if self._channel is not None:
            self._channel.close()
            self._channel = None
