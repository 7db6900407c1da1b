"""A fuzz campaign against the real daemon: generate, send, check every reply, restart.

Request ``i`` of seed ``s`` is a function of ``(s, i)`` alone (:func:`generated`):
25% a valid request from :mod:`tests.fuzz.seeds`, 50% such a request with one or
two fields mutated, 20% a random message of the method's type, 5% bytes that
decode as no message of it (:mod:`tests.fuzz.generate`). Before them, every RPC of
both sockets gets each of :func:`~tests.fuzz.generate.malformed`'s payloads
(:meth:`Campaign.sweep`). Requests go one at a time to a 2-node fake machine (or a
40-node one, tests/fuzz/machines.py) with
``--podresources-socket``, over channels with gRPC's default settings; a client
stream (reflection) carries one request.

Each reply must be a real answer: never INTERNAL, UNKNOWN, UNAVAILABLE or
DEADLINE_EXCEEDED; an error's message at most ``errors.MAX_MESSAGE_BYTES`` and
never cut by the last line of defence, its trailers under :data:`TRAILER_BYTES`; a
``numamem.v1`` error carries its
``google.rpc.Status`` with a numamem ErrorInfo that agrees with the status (the
client received the trailers intact); bytes that are no request are answered
INVALID_ARGUMENT "the request does not decode" on both sockets; the daemon's CPU time
and RSS growth for it stay under an affine bound in its bytes, and every restart serves
within its usual CPU time (:mod:`tests.fuzz.cost`). Every :attr:`Campaign.check_every`
requests: the daemon runs, health is SERVING, RSS stays below :data:`RSS_LIMIT`,
the memory manager's state keeps its invariants
(:mod:`numamem.memorymanager.state.invariants`), and the state equals the
:class:`Model` of the acknowledged writes. A restart
(SIGKILL and SIGTERM in turn) must bring back exactly the state before it.
"""

from __future__ import annotations

import json
import random
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2
from grpc_status import rpc_status

from numamem.api.convert import state_from_proto
from numamem.api.ratelimit import TokenBucket
from numamem.api.status import DOMAIN, REASONS
from numamem.checkpoint.containerfile import decode_container_file
from numamem.checkpoint.mmstore import CONTAINERS_FILE
from numamem.client import error_reason
from numamem.errors import CUT_MARK, MAX_MESSAGE_BYTES
from numamem.memorymanager.state.invariants import violations
from numamem.testing.daemon import DaemonProcess
from numamem.v1 import memorymanager_pb2 as mm
from numamem.v1 import metacache_pb2 as mc
from numamem.v1 import podresources_pb2 as pr
from tests.daemon import STATIC_ARGS
from tests.fuzz.catalogue import BY_PATH, MAIN, PODRESOURCES, RPCS, Rpc
from tests.fuzz.cost import CostOracle
from tests.fuzz.generate import describe, malformed, mutate, random_message, undecodable
from tests.fuzz.machines import long_searches, write_machine
from tests.fuzz.seeds import SEEDS

RSS_LIMIT = 200 * 2**20
"""The daemon's resident memory stays below this however long the campaign (10^5 requests
reach 93-100 MiB)."""
MAX_MESSAGE = 4 * 2**20
"""--max-message-bytes (the default): bigger requests are grpc's own RESOURCE_EXHAUSTED."""
TIMEOUT_S = 30.0
PODRESOURCES_QPS = 80.0
"""The client keeps below the podresources socket's rate limit (the kubelet's 100/s, burst 10)."""
RATE_LIMITED = "rejected by rate limit"
TRAILER_BYTES = 5 * 1024
"""An error's trailers stay below this (numamem.errors.MAX_MESSAGE_BYTES says why), well under
the 8 KiB soft limit of a client with default settings."""
BAD_CODES = frozenset(
    {
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.DATA_LOSS,
    }
)
KINDS = ("valid", "mutated", "random", "undecodable")
UNDECODABLE = "the request does not decode: "
"""How both sockets begin the message of their INVALID_ARGUMENT for bytes that are no
request (numamem.api.interceptors)."""


@dataclass
class Generated:
    index: int
    rpc: Rpc
    request: Message
    kind: str
    mutations: list[str] = field(default_factory=list)
    payload: bytes | None = None
    """What is sent instead of ``request`` (kind ``undecodable``)."""


WEIGHTS = {
    "/numamem.v1.Info/GetBuildInfo": 0.3,
    "/numamem.v1.MemoryManager/SyncActivePods": 0.3,
    "/numamem.v1.MetaWriter/DeleteContainers": 0.3,
    "/numamem.v1.MetaWriter/GCPoolEntries": 0.3,
    "/numamem.v1.MetaWriter/SetRegionEntries": 0.5,
    "/numamem.v1.MetaWriter/AddContainer": 2.0,
    "/numamem.v1.MetaWriter/SetContainerInfo": 2.0,
    "/numamem.v1.MemoryManager/Admit": 3.0,
    "/numamem.v1.MemoryManager/Allocate": 2.0,
    "/numamem.v1.MetaWriter/SetPoolInfo": 2.0,
    "/numamem.v1.MetaWriter/SetRegionInfo": 2.0,
}
"""How often an RPC is picked relative to the others (1 unless listed): the calls that replace
or release everything are rarer, so that the state stays big enough to meet the other calls."""
_WEIGHTS = [WEIGHTS.get(rpc.path, 1.0) for rpc in RPCS]


def generated(seed: int, index: int) -> Generated:
    """Request ``index`` of the campaign with ``seed``."""
    rng = random.Random(f"{seed}/{index}")
    (rpc,) = rng.choices(RPCS, _WEIGHTS)
    roll = rng.random()
    if roll < 0.25:
        return Generated(index, rpc, SEEDS[rpc.path](rng), "valid")
    if roll < 0.75:
        request = SEEDS[rpc.path](rng)
        done = mutate(request, rng, rng.choice((1, 2)))
        return Generated(index, rpc, request, "mutated", done)
    if roll < 0.95:
        return Generated(index, rpc, random_message(rpc.request, rng), "random")
    what, payload = undecodable(rpc.request, SEEDS[rpc.path](rng), rng)
    return Generated(index, rpc, rpc.request(), "undecodable", [what], payload)


@dataclass
class Outcome:
    code: grpc.StatusCode
    details: str = ""
    error: grpc.RpcError | None = None
    responses: list[Message] = field(default_factory=list)
    seconds: float = 0.0


PROBE_POD = mm.Pod(
    uid="fuzz-probe-uid", namespace="fuzz", name="probe", containers=[mm.Container(name="probe")]
)
"""A BestEffort pod no generated request names (seeds use ``uid-<i>``): its container id
makes the daemon write its container map (:meth:`Client.container_map`)."""
PROBE_ID = "fuzz-probe-container-id"


class Client:
    """Default-settings channels to both sockets; calls any RPC of the catalogue by path."""

    def __init__(self, main_socket: str, podresources_socket: str, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.channels = {
            MAIN: grpc.insecure_channel(f"unix://{main_socket}"),
            PODRESOURCES: grpc.insecure_channel(f"unix://{podresources_socket}"),
        }
        self.bucket = TokenBucket(PODRESOURCES_QPS, 5)  # the daemon's own bucket, client-side

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()

    def call(self, rpc: Rpc, request: Message, payload: bytes | None = None) -> Outcome:
        """One call of ``rpc`` with ``request`` (or the bytes ``payload`` instead)."""
        if rpc.socket == PODRESOURCES:
            while not self.bucket.allow():
                time.sleep(1 / PODRESOURCES_QPS)
        channel = self.channels[rpc.socket]
        serialize: Any = type(request).SerializeToString if payload is None else (lambda _: payload)
        start = time.perf_counter()
        try:
            if rpc.client_streaming:
                responses = list(
                    channel.stream_stream(
                        rpc.path,
                        request_serializer=serialize,
                        response_deserializer=rpc.response.FromString,
                    )(iter([request]), timeout=TIMEOUT_S)
                )
            elif rpc.streaming:
                stream = channel.unary_stream(
                    rpc.path,
                    request_serializer=serialize,
                    response_deserializer=rpc.response.FromString,
                )(request, timeout=TIMEOUT_S)
                if rpc.path == "/grpc.health.v1.Health/Watch":  # never ends: the first answer
                    responses = [next(stream)]
                    stream.cancel()
                else:
                    responses = list(stream)
            else:
                responses = [
                    channel.unary_unary(
                        rpc.path,
                        request_serializer=serialize,
                        response_deserializer=rpc.response.FromString,
                    )(request, timeout=TIMEOUT_S)
                ]
        except grpc.RpcError as err:
            return Outcome(err.code(), err.details() or "", err, [], time.perf_counter() - start)
        return Outcome(grpc.StatusCode.OK, "", None, responses, time.perf_counter() - start)

    def ok(self, path: str, request: Message) -> list[Message]:
        """The answer of a call that must succeed (checks and snapshots)."""
        outcome = self.call(BY_PATH[path], request)
        if outcome.code != grpc.StatusCode.OK:
            raise AssertionError(f"{path} answered {outcome.code.name}: {outcome.details}")
        return outcome.responses

    def container_map(self) -> dict[str, list[str]]:
        """The memory manager's container map as the daemon holds it: id -> [pod uid, name].

        No RPC returns the map, so it is read from ``numamem_containers`` with numamem's
        own decoder. The file can lag behind the daemon's memory (a restart drops ids of
        containers without blocks, or could lose ids, and writes the map only with the
        next change), so the probe pod's AddContainer and RemoveContainer make the daemon
        write it twice first: after them the file is the map in memory, which they leave
        as it was (the probe pod has no blocks, no name is recorded for it)."""
        add = mm.AddContainerRequest(pod=PROBE_POD, container_name="probe", container_id=PROBE_ID)
        self.ok("/numamem.v1.MemoryManager/AddContainer", add)
        (removed,) = self.ok(
            "/numamem.v1.MemoryManager/RemoveContainer",
            mm.RemoveContainerRequest(container_id=PROBE_ID),
        )
        if not removed.found:
            raise AssertionError("RemoveContainer did not find the probe's container id")
        ids, _ = decode_container_file((self.state_dir / CONTAINERS_FILE).read_bytes())
        return {cid: list(ref) for cid, ref in sorted(ids.items())}


def trailer_bytes(outcome: Outcome) -> int:
    """The size of an error's trailers on the wire: ``grpc-status``, the percent-encoded
    ``grpc-message`` and the other trailers (``-bin`` ones base64-encoded)."""
    message = sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in outcome.details.encode())
    size = len("grpc-status") + 2 + len("grpc-message") + message
    trailers = outcome.error.trailing_metadata() if outcome.error is not None else None
    for key, value in trailers or ():
        size += len(key) + (-(-len(value) // 3) * 4 if key.endswith("-bin") else len(value))
    return size


def reply_problems(
    rpc: Rpc, request: Message, outcome: Outcome, payload: bytes | None = None
) -> list[str]:
    """What is wrong with the reply to ``request`` (or to the undecodable bytes ``payload``
    sent instead; nothing for a real answer)."""
    code, details = outcome.code, outcome.details
    if payload is not None:
        rate_limited = rpc.socket == PODRESOURCES and details == RATE_LIMITED
        if code != grpc.StatusCode.INVALID_ARGUMENT and not rate_limited:
            return [
                f"bytes that are no {rpc.request.DESCRIPTOR.full_name} answered {code.name}: "
                f"{details[:300]!r} (not INVALID_ARGUMENT {UNDECODABLE!r}...)"
            ]
        if not rate_limited and not details.startswith(UNDECODABLE):
            return [f"bytes that are no request: {details[:300]!r}, not {UNDECODABLE!r}..."]
    if code == grpc.StatusCode.OK:
        return []
    problems = []
    if code in BAD_CODES:
        problems.append(f"answered {code.name}: {details[:300]!r}")
    size = len(details.encode())
    if size > MAX_MESSAGE_BYTES:
        problems.append(f"a message of {size} bytes (the bound is {MAX_MESSAGE_BYTES})")
    if CUT_MARK in details:
        problems.append("the message was cut by api/status: its source quotes without quote()")
    if "metadata" in details and "exceeds" in details:
        problems.append(f"the client rejected the trailers: {details[:300]!r}")
    wire = trailer_bytes(outcome)
    if wire > TRAILER_BYTES:
        problems.append(f"trailers of {wire} bytes on the wire (the bound is {TRAILER_BYTES})")
    oversized = (
        code == grpc.StatusCode.RESOURCE_EXHAUSTED
        and request.ByteSize() > MAX_MESSAGE
        and "larger than max" in details
    )
    if oversized or problems:
        return problems
    if rpc.socket == PODRESOURCES:
        expected = (
            (code == grpc.StatusCode.RESOURCE_EXHAUSTED and details == RATE_LIMITED)
            or (code == grpc.StatusCode.NOT_FOUND and details.endswith(" not found"))
            or (code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(UNDECODABLE))
        )
        if not expected:
            problems.append(f"an unexpected podresources reply {code.name}: {details[:300]!r}")
    elif rpc.path.startswith("/numamem.v1."):
        problems += _error_info_problems(outcome)
    return problems


def _reason(outcome: Outcome) -> str | None:
    """The numamem ErrorInfo reason of a failed call, or None (also when its status details
    disagree with its status: :func:`reply_problems` reports that)."""
    try:
        return error_reason(outcome.error) if outcome.error is not None else None
    except ValueError:
        return None


def _error_info_problems(outcome: Outcome) -> list[str]:
    try:
        status = rpc_status.from_call(outcome.error)
    except ValueError as err:
        return [f"the status details disagree with the status: {err}"]
    if status is None:
        return ["no google.rpc.Status in the trailers"]
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == DOMAIN and info.reason in REASONS:
            return []
    return [f"no numamem ErrorInfo among the details: {list(status.details)}"]


# --- the model of acknowledged writes ------------------------------------------------


@dataclass
class Model:
    """What acknowledged writes left: metacache keys exactly, memory manager pods bounded
    from both sides.

    ``mm_may_hold``: pods an acknowledged Allocate or Admit gave memory and no
    acknowledged ReleasePod or SyncActivePods took away; the daemon's state holds
    no other pod. ``mm_must_hold``: containers an acknowledged Allocate or Admit
    pinned (with those blocks) that no later request can have released: any
    request naming the pod (its spec may drop the container: stale state), a
    SyncActivePods, a RemoveContainer that found an id not known to belong to
    another container forget them. ``mm_live_ids``: container ids the memory
    manager's container map must hold (see :meth:`_forget_ids`); a RemoveContainer
    of one must answer found, and the map read from the state directory must hold
    each. ``pods``/``pools``/``regions``: the metacache's keys exactly.
    """

    mm_may_hold: set[str] = field(default_factory=set)
    mm_must_hold: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    """(pod uid, container) -> blocks (None for an init container: later containers reuse
    its memory, so its blocks shrink)."""
    mm_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    """container id -> the container its last acknowledged AddContainer recorded (what the
    id refers to while the daemon holds it)."""
    mm_live_ids: set[str] = field(default_factory=set)
    """Ids of :attr:`mm_ids` that the daemon holds for sure: recorded by an acknowledged
    AddContainer and not released since."""
    pods: dict[str, set[str]] = field(default_factory=dict)
    pools: set[str] = field(default_factory=set)
    regions: set[str] = field(default_factory=set)

    def apply(self, rpc: Rpc, request: Any, outcome: Outcome) -> list[str]:
        """Record a request and its answer; returns what the answer contradicts in the model."""
        name = rpc.method.name
        ok = outcome.code == grpc.StatusCode.OK
        if rpc.method.containing_service.name == "MemoryManager":
            problems = self._check_remove_container(name, request, outcome)
            self._forget_memory_manager(name, request, outcome)
            self._forget_ids(name, request, outcome)
            if ok and rpc.writes:
                self._apply_memory_manager(name, request, outcome.responses[0])
            return problems
        if not ok or not rpc.writes:
            return []
        return self._apply_metacache(name, request, outcome.responses[0])

    def _forget_memory_manager(self, name: str, request: Any, outcome: Outcome) -> None:
        """Drop from ``mm_must_hold`` what this request may have released, whatever its answer."""
        uids = set()
        if name == "SyncActivePods":
            self.mm_must_hold.clear()
        elif name == "ReleasePod":
            uids.add(request.pod_uid)
        elif name == "RemoveContainer":
            found = outcome.code == grpc.StatusCode.OK and outcome.responses[0].found
            ref = self.mm_ids.get(request.container_id)
            if found and ref is None:
                self.mm_must_hold.clear()
            elif ref is not None:
                self.mm_must_hold.pop(ref, None)
        elif request.DESCRIPTOR.fields_by_name.get("pod") is not None:
            uids.add(request.pod.uid)
        if name == "Resize" and outcome.code == grpc.StatusCode.OK:
            for ref in outcome.responses[0].moved:  # an extended group: their blocks moved too
                self.mm_must_hold.pop((ref.pod_uid, ref.container_name), None)
        for key in [k for k in self.mm_must_hold if k[0] in uids]:
            del self.mm_must_hold[key]

    def _check_remove_container(self, name: str, request: Any, outcome: Outcome) -> list[str]:
        """A RemoveContainer of an id the daemon must hold has to find it."""
        if name != "RemoveContainer" or request.container_id not in self.mm_live_ids:
            return []
        if outcome.code == grpc.StatusCode.OK and outcome.responses[0].found:
            return []
        uid, ctr = self.mm_ids[request.container_id]
        answer = "found=false" if outcome.code == grpc.StatusCode.OK else outcome.code.name
        return [
            f"RemoveContainer of container id {request.container_id[:80]!r} answered {answer}, "
            f"but an acknowledged AddContainer recorded it for {uid[:80]!r}/{ctr[:80]!r} and "
            "nothing released it since"
        ]

    def _forget_ids(self, name: str, request: Any, outcome: Outcome) -> None:
        """Drop from ``mm_live_ids`` what this request may have released, whatever its answer.

        The memory manager releases an id (``remove_by_container_ref``: the oldest id of
        a container) when RemoveContainer, ReleasePod or an AddContainer (for the pod's
        earlier regular init containers) releases its container, and SyncActivePods
        releases every id of a container it was not given. The model forgets every id of
        such a container, which keeps it a lower bound whatever the daemon's order of ids.
        Restarts drop ids of containers without blocks (:meth:`restarted`)."""
        live = self.mm_live_ids
        if not live:
            return
        if name == "RemoveContainer":
            found = outcome.code == grpc.StatusCode.OK and outcome.responses[0].found
            ref = self.mm_ids.get(request.container_id)
            if found and ref is None:
                live.clear()  # an id the model forgot: it may have been any container's
            elif ref is not None:
                self.mm_live_ids = {i for i in live if self.mm_ids[i] != ref}
        elif name == "ReleasePod":
            self.mm_live_ids = {i for i in live if self.mm_ids[i][0] != request.pod_uid}
        elif name == "SyncActivePods":
            given: dict[str, set[str]] = {}
            for p in request.pods:
                names = {c.name for c in (*p.init_containers, *p.containers)}
                given[p.uid] = given[p.uid] & names if p.uid in given else names
            self.mm_live_ids = {
                i for i in live if self.mm_ids[i][1] in given.get(self.mm_ids[i][0], ())
            }
        elif name == "AddContainer":
            inits = {(request.pod.uid, c.name) for c in request.pod.init_containers}
            self.mm_live_ids = {i for i in live if self.mm_ids[i] not in inits}

    def restarted(self, state: Any) -> None:
        """A restart drops the ids of containers without blocks in ``state`` (GetState before
        the restart)."""
        self.mm_live_ids = {
            i
            for i in self.mm_live_ids
            if self.mm_ids[i][0] in state.entries
            and self.mm_ids[i][1] in state.entries[self.mm_ids[i][0]].containers
        }

    def _apply_memory_manager(self, name: str, request: Any, response: Any) -> None:
        if name in ("Allocate", "AllocatePod") or (name == "Admit" and response.admitted):
            self.mm_may_hold.add(request.pod.uid)
            inits = {c.name for c in request.pod.init_containers}
            if name == "Allocate":
                pinned = [(request.container_name, list(response.blocks))]
            elif name == "AllocatePod":
                pinned = [(c, list(b.blocks)) for c, b in response.containers.items()]
            else:
                pinned = [(c.container_name, list(c.blocks)) for c in response.containers]
            for ctr, blocks in pinned:
                if blocks:
                    key = (request.pod.uid, ctr)
                    self.mm_must_hold[key] = None if ctr in inits else blocks  # type: ignore[assignment]
        elif name == "AddContainer":
            self.mm_ids[request.container_id] = (request.pod.uid, request.container_name)
            self.mm_live_ids.add(request.container_id)
        elif name == "ReleasePod":
            self.mm_may_hold.discard(request.pod_uid)
        elif name == "SyncActivePods":
            self.mm_may_hold &= {p.uid for p in request.pods}

    def _apply_metacache(self, name: str, request: Any, response: Any) -> list[str]:
        problems = []
        if name == "AddContainer":
            names = self.pods.setdefault(request.pod_uid, set())
            if request.HasField("info"):
                names.add(request.container_name)
        elif name == "SetContainerInfo":
            self.pods.setdefault(request.pod_uid, set()).add(request.container_name)
        elif name == "DeleteContainer":
            self._delete(request.pod_uid, request.container_name)
        elif name == "RemovePod":
            self.pods.pop(request.pod_uid, None)
        elif name == "DeleteContainers":
            for ref in response.deleted:
                if ref.container_name not in self.pods.get(ref.pod_uid, ()):
                    problems.append(f"DeleteContainers deleted {ref} that was not there")
                self._delete(ref.pod_uid, ref.container_name)
        elif name == "SetPoolInfo":
            self.pools.add(request.pool_name)
        elif name == "DeletePool":
            self.pools.discard(request.pool_name)
        elif name == "GCPoolEntries":
            dead = sorted(self.pools - set(request.living_pool_names))
            if list(response.deleted) != dead:
                problems.append(f"GCPoolEntries deleted {list(response.deleted)}, not {dead}")
            self.pools -= set(dead)
        elif name == "SetRegionEntries":
            self.regions = set(request.entries)
        elif name == "SetRegionInfo":
            self.regions.add(request.region_name)
        return problems

    def _delete(self, pod_uid: str, name: str) -> None:
        names = self.pods.get(pod_uid)
        if names is not None and name in names:
            names.discard(name)
            if not names:
                del self.pods[pod_uid]

    def problems(self, client: Client) -> list[str]:
        """Where the daemon's state differs from the model."""
        out = []
        (state,) = client.ok("/numamem.v1.MemoryManager/GetState", mm.GetStateRequest())
        out += [f"memory manager state: {v}" for v in violations(*state_from_proto(state))[:5]]
        held = client.container_map()
        for cid in sorted(self.mm_live_ids)[:1000]:
            if held.get(cid) != list(self.mm_ids[cid]):
                uid, ctr = self.mm_ids[cid]
                out.append(
                    f"memory manager container map holds {held.get(cid)} for container id "
                    f"{cid[:80]!r}, which an acknowledged AddContainer recorded for "
                    f"{uid[:80]!r}/{ctr[:80]!r} and nothing released since"
                )
        extra = sorted(set(state.entries) - self.mm_may_hold)
        if extra:
            out.append(f"memory manager pods {extra[:5]} hold memory no acknowledged write left")
        for (uid, ctr), blocks in sorted(self.mm_must_hold.items()):
            held = state.entries[uid].containers[ctr].blocks if uid in state.entries else None
            if uid not in state.entries or ctr not in state.entries[uid].containers:
                out.append(f"memory manager lost {uid!r}/{ctr!r}, pinned by an acknowledged write")
            elif blocks is not None and list(held or []) != blocks:
                out.append(f"memory manager holds other blocks for {uid!r}/{ctr!r}: {held}")
        listed: dict[str, set[str]] = {}
        for info in client.ok("/numamem.v1.MetaReader/ListContainers", mc.ListContainersRequest()):
            listed.setdefault(info.pod_uid, set()).add(info.container_name)
        expected = {p: names for p, names in self.pods.items() if names}
        if listed != expected:
            out.append(f"metacache containers differ from the model: {_diff(listed, expected)}")
        for uid in sorted(p for p, names in self.pods.items() if not names)[:50]:
            (entries,) = client.ok(
                "/numamem.v1.MetaReader/GetContainerEntries",
                mc.GetContainerEntriesRequest(pod_uid=uid),
            )
            if entries.containers:
                out.append(f"metacache pod {uid!r} has containers the model does not")
        pools = {
            p.pool_name
            for p in client.ok("/numamem.v1.MetaReader/ListPools", mc.ListPoolsRequest())
        }
        if pools != self.pools:
            out.append(f"metacache pools differ from the model: {_diff(pools, self.pools)}")
        regions = {
            r.region_name
            for r in client.ok("/numamem.v1.MetaReader/ListRegions", mc.ListRegionsRequest())
        }
        if regions != self.regions:
            out.append(f"metacache regions differ from the model: {_diff(regions, self.regions)}")
        return out


def _diff(actual: Any, expected: Any) -> str:
    if isinstance(actual, dict):
        keys = sorted(set(actual) ^ set(expected)) or sorted(
            k for k in actual if actual[k] != expected.get(k)
        )
        return f"{len(keys)} pods differ, e.g. {[(k, actual.get(k), expected.get(k)) for k in keys[:3]]}"
    return f"only in the daemon {sorted(actual - expected)[:5]}, only in the model {sorted(expected - actual)[:5]}"


def snapshot(client: Client, model: Model) -> dict[str, Any]:
    """Everything a restart must bring back, as comparable JSON values."""

    def js(msg: Message) -> Any:
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    (state,) = client.ok("/numamem.v1.MemoryManager/GetState", mm.GetStateRequest())
    containers = client.ok("/numamem.v1.MetaReader/ListContainers", mc.ListContainersRequest())
    empty = {}
    for uid in sorted(p for p, names in model.pods.items() if not names)[:50]:
        (entries,) = client.ok(
            "/numamem.v1.MetaReader/GetContainerEntries", mc.GetContainerEntriesRequest(pod_uid=uid)
        )
        empty[uid] = js(entries)
    (listed,) = client.ok("/v1.PodResourcesLister/List", pr.ListPodResourcesRequest())
    return {
        "memory manager state": js(state),
        "memory manager container map": client.container_map(),
        "metacache containers": [js(c) for c in containers],
        "metacache empty pods": empty,
        "metacache pools": [
            js(p) for p in client.ok("/numamem.v1.MetaReader/ListPools", mc.ListPoolsRequest())
        ],
        "metacache regions": [
            js(r) for r in client.ok("/numamem.v1.MetaReader/ListRegions", mc.ListRegionsRequest())
        ],
        "podresources": sorted(json.dumps(js(p), sort_keys=True) for p in listed.pod_resources),
    }


def restored_map(held: dict[str, list[str]], state: Any) -> dict[str, list[str]]:
    """What a restart restores of the container map ``held`` with ``state`` (GetState):
    the restore drops the ids of containers without blocks, and only those."""
    return {
        cid: ref
        for cid, ref in held.items()
        if ref[0] in state.entries and ref[1] in state.entries[ref[0]].containers
    }


# --- the campaign ---------------------------------------------------------------------


REPLAY = "python -m tests.fuzz"


@dataclass
class Finding:
    seed: int
    index: int
    what: str
    problem: str
    request: str = ""
    check_every: int = 500
    restart_every: int = 0
    machine: str = "small"
    """The campaign's parameters: a replay needs every one (restarts and checks change
    what the daemon holds when request ``index`` arrives)."""

    def replay_args(self, alone: bool = False) -> list[str]:
        """The arguments of ``python -m tests.fuzz`` that replay the campaign up to this
        request (``alone``: this request only, on a fresh daemon)."""
        which = ["--index", str(self.index)] if alone else ["--requests", str(self.index + 1)]
        return [
            "--seed",
            str(self.seed),
            *which,
            "--check-every",
            str(self.check_every),
            "--restart-every",
            str(self.restart_every),
            *(["--machine", self.machine] if self.machine != "small" else []),
        ]

    def report(self) -> str:
        lines = [f"seed {self.seed} request {self.index} {self.what}: {self.problem}"]
        if self.request:
            lines.append(f"  request: {self.request}")
        lines.append(f"  replay: {REPLAY} {shlex.join(self.replay_args())}")
        if self.index >= 0:  # -1: the sweep, which every replay sends first
            lines.append(
                f"  this request alone: {REPLAY} {shlex.join(self.replay_args(alone=True))}"
            )
        return "\n".join(lines)


@dataclass
class Campaign:
    """``requests`` requests of ``seed`` against one daemon under ``root``."""

    root: Path
    seed: int
    check_every: int = 500
    restart_every: int = 0
    """0: restart only at the end."""
    machine: str = "small"
    """tests/fuzz/machines.py: ``small`` (2 nodes) or ``large`` (40, prefer-closest)."""
    indices: range | None = None
    max_findings: int = 20
    codes: Counter[tuple[str, str]] = field(default_factory=Counter)
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(RPC, ErrorInfo reason) of each numamem error reply, the sweep's included."""
    kinds: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    model: Model = field(default_factory=Model)
    max_rss: int = 0
    restarts: int = 0
    sent: int = 0
    swept: int = 0
    """Requests of :meth:`sweep` (not in :attr:`sent`)."""
    slowest: tuple[float, str] = (0.0, "")
    cost: CostOracle = field(default_factory=CostOracle)
    daemon: DaemonProcess | None = None
    client: Client | None = None

    @property
    def podresources_socket(self) -> str:
        return str(self.root / "pr" / "podresources.sock")

    def start(self) -> None:
        sysfs = self.root / "sys"
        machine_args = write_machine(sysfs, self.machine)
        self.daemon = DaemonProcess(
            self.root,
            [
                "--sysfs-root",
                str(sysfs),
                *STATIC_ARGS,
                "--topology-manager-policy",
                "restricted",
                "--podresources-socket",
                self.podresources_socket,
                "--max-message-bytes",
                str(MAX_MESSAGE),
                "--log-level",
                "warning",
                *machine_args,
            ],
        ).start()
        self.client = Client(
            self.daemon.socket, self.podresources_socket, Path(self.daemon.state_dir)
        )
        self._started(-1, "start")

    def _started(self, index: int, what: str) -> None:
        assert self.daemon is not None and self.daemon.proc is not None
        for problem in self.cost.started(self.daemon.proc.pid):
            self._find(index, what, problem)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.daemon is not None:
            self.daemon.kill()

    def run(self, requests: int) -> None:
        """:meth:`sweep`, then send requests ``0..requests-1`` (or :attr:`indices`), checking
        as described; stops early when the daemon dies or after :attr:`max_findings` findings."""
        indices = self.indices if self.indices is not None else range(requests)
        last = 0
        if not self.sweep() or not self.long_searches():
            return
        for n, index in enumerate(indices, 1):
            last = index
            if not self._send(generated(self.seed, index)) or self._enough():
                return
            if n % self.check_every == 0 and (not self.check(index) or self._enough()):
                return
            periodic = self.restart_every and n % self.restart_every == 0 and n < len(indices)
            if periodic and not self.restart(index):
                return
        checked = len(indices) % self.check_every == 0  # the loop's last check was just now
        if checked or self.check(last):
            self.restart(last)

    def _enough(self) -> bool:
        return len(self.findings) >= self.max_findings

    def _send(self, gen: Generated) -> bool:
        assert self.client is not None
        outcome = self.client.call(gen.rpc, gen.request, gen.payload)
        if gen.index >= 0:
            self.sent += 1
            self.kinds[gen.kind] += 1
        self.codes[(gen.rpc.short, outcome.code.name)] += 1
        if (reason := _reason(outcome)) is not None:
            self.reasons[(gen.rpc.short, reason)] += 1
        if outcome.seconds > self.slowest[0]:
            self.slowest = (outcome.seconds, f"{gen.rpc.short} request {gen.index}")
        problems = reply_problems(gen.rpc, gen.request, outcome, gen.payload)
        size = len(gen.payload) if gen.payload is not None else gen.request.ByteSize()
        problems += self.cost.charge(size, f"{gen.rpc.short} request {gen.index}", gen.rpc.short)
        if gen.payload is None:  # bytes that are no request change nothing, or are a finding
            problems += self.model.apply(gen.rpc, gen.request, outcome)
        if problems:  # describing every request took longer than the oracle's readings
            what = f"({gen.kind}{': ' + '; '.join(gen.mutations) if gen.mutations else ''}) {gen.rpc.short}"
            sent = describe(gen.request) if gen.payload is None else f"bytes {gen.payload[:200]!r}"
            for problem in problems:
                self._find(gen.index, what, problem, sent)
        return self._alive(gen.index)

    def sweep(self) -> bool:
        """Every RPC of both sockets gets each of :func:`malformed`'s payloads (a campaign's
        random 5% would miss the rarely picked RPCs). Their findings have index -1: the
        replay of a campaign of 0 requests sends the sweep alone. False when the daemon died."""
        for rpc in RPCS:
            for what, payload in malformed(rpc.request):
                gen = Generated(-1, rpc, rpc.request(), "undecodable", [what], payload)
                if not self._send(gen):
                    return False
                self.swept += 1
        return True

    def long_searches(self) -> bool:
        """On the large machine: short requests that spend the whole search budget
        (:func:`tests.fuzz.machines.long_searches`, index -1 like the sweep), so that the
        cost oracle charges the budget. False when the daemon died."""
        searches = long_searches() if self.machine == "large" else []
        for path, request in searches:
            if not self._send(Generated(-1, BY_PATH[path], request, "long search")):
                return False
            self.swept += 1
        return True

    def _alive(self, index: int) -> bool:
        assert self.daemon is not None and self.daemon.proc is not None
        if self.daemon.proc.poll() is None:
            return True
        self._find(
            index,
            "the daemon",
            f"exited with {self.daemon.proc.returncode}: {self.daemon.stderr()[-2000:]}",
        )
        return False

    def _find(self, index: int, what: str, problem: str, request: str = "") -> None:
        if "INTERNAL" in problem and self.daemon is not None:
            problem += f"\n  daemon log: {self.daemon.stderr()[-1500:]}"
        self.findings.append(
            Finding(
                self.seed,
                index,
                what,
                problem,
                request,
                self.check_every,
                self.restart_every,
                self.machine,
            )
        )

    def check(self, index: int) -> bool:
        """Alive, SERVING, RSS bound, state equals the model."""
        assert self.client is not None and self.daemon is not None and self.daemon.proc
        if not self._alive(index):
            return False
        (health,) = self.client.ok("/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest())
        if health.status != health_pb2.HealthCheckResponse.SERVING:
            self._find(
                index,
                "health",
                f"is {health_pb2.HealthCheckResponse.ServingStatus.Name(health.status)}",
            )
        rss = psutil.Process(self.daemon.proc.pid).memory_info().rss
        self.max_rss = max(self.max_rss, rss)
        if rss > RSS_LIMIT:
            self._find(index, "RSS", f"{rss / 2**20:.0f} MiB, above {RSS_LIMIT / 2**20:.0f} MiB")
        for problem in self.model.problems(self.client):
            self._find(index, "the model", problem)
        self.cost.mark()
        return True

    def restart(self, index: int) -> bool:
        """Stop (SIGKILL and SIGTERM in turn), start, and compare the state before and after;
        False when the daemon does not come back."""
        assert self.client is not None and self.daemon is not None
        before = snapshot(self.client, self.model)
        (state,) = self.client.ok("/numamem.v1.MemoryManager/GetState", mm.GetStateRequest())
        self.model.restarted(state)
        before["memory manager container map"] = restored_map(
            before["memory manager container map"], state
        )
        self.client.close()
        self.daemon.stop(9 if self.restarts % 2 == 0 else 15)
        self.restarts += 1
        try:
            self.daemon.start()
        except AssertionError as err:
            self._find(index, f"restart {self.restarts}", f"the daemon did not come back: {err}")
            return False
        self.client = Client(
            self.daemon.socket, self.podresources_socket, Path(self.daemon.state_dir)
        )
        self._started(index, f"restart {self.restarts}")
        after = snapshot(self.client, self.model)
        for key in before:
            if before[key] != after[key]:
                self._find(
                    index,
                    f"restart {self.restarts}",
                    f"{key} differs: {_first_difference(before[key], after[key])}",
                )
        return self.check(index)

    def histogram(self) -> str:
        return histogram(self.codes)


def _first_difference(before: Any, after: Any) -> str:
    a = json.dumps(before, sort_keys=True)
    b = json.dumps(after, sort_keys=True)
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return f"before ...{a[max(0, at - 80) : at + 80]}... after ...{b[max(0, at - 80) : at + 80]}..."


def histogram(codes: Counter[tuple[str, str]]) -> str:
    """A table of status codes per RPC, then overall (markdown)."""
    names = sorted({code for _, code in codes}, key=lambda c: (c != "OK", c))
    rpcs = sorted({rpc for rpc, _ in codes})
    rows = [
        "| RPC | " + " | ".join(names) + " | total |",
        "|---|" + "---:|" * (len(names) + 1),
    ]
    for rpc in rpcs:
        counts = [codes.get((rpc, n), 0) for n in names]
        rows.append(f"| {rpc} | " + " | ".join(map(str, counts)) + f" | {sum(counts)} |")
    totals = [sum(codes.get((r, n), 0) for r in rpcs) for n in names]
    rows.append("| **all** | " + " | ".join(map(str, totals)) + f" | {sum(totals)} |")
    return "\n".join(rows)
