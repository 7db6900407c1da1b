"""What an RPC's log line says besides method, code and duration: whom it was about, what was
decided and, when refused, why.

When a call ends, the interceptor (:mod:`numamem.api.interceptors`) adds to its line what
:func:`fields` reads from the request, the reply and the error status the client got; a
unary call's servicer may add what only it knows (:func:`attach`, inside the
:func:`recording` the interceptor opens around the handler: the pod of a RemoveContainer,
which the request names only by container id). The fields:

* ``pod_uid``, ``pod`` (``namespace/name`` when the request carries them), ``containers``
  (a request's pod: init containers first), ``container``, ``container_id``;
* ``result``: ``admitted``/``rejected`` (Admit), ``allocated`` (Allocate, AllocatePod),
  ``added``, ``removed``/``not_found`` (RemoveContainer), ``released`` (ReleasePod),
  ``synced`` (SyncActivePods), the resize action (``unchanged``, ``grown_in_group``, ...,
  with ``memory`` in bytes afterwards); ``nodes``: the NUMA nodes pinned (admitted,
  allocated, resized);
  ``released``/``removed``: the containers freed;
* ``reason`` and ``message``: the kubelet's admission reason and message of a rejected pod
  (``TopologyAffinityError``, ``UnexpectedAdmissionError``, ...), or, for every error
  status, its ErrorInfo reason (:func:`numamem.api.status.reason_in`; "" when it has none,
  e.g. a status grpcio chose) and its message.

So ``why was pod X rejected`` is the line whose ``pod_uid`` is X. Bounded whatever the
request: at most :data:`MAX_LISTED` names per list (``containers_omitted`` and the like
say how many more there were), :data:`MAX_NODES` node ids, request values quoted
(:func:`numamem.errors.quote`: escaped, at most 96 bytes each) and messages cut to
:data:`numamem.errors.MAX_MESSAGE_BYTES`. Payloads are never logged beyond these fields.

What is attached belongs to the thread running the call (a context variable the
interceptor sets and resets around a unary handler); :func:`attach` elsewhere does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

from google.protobuf.message import Message

from numamem.errors import MAX_MESSAGE_BYTES, quote

MAX_LISTED = 16
"""Names (containers, released containers) one list of a log line holds at most."""
MAX_NODES = 64
"""NUMA node ids one log line lists at most."""


_attached: ContextVar[dict[str, Any] | None] = ContextVar("numamem_rpc_fields", default=None)


@contextlib.contextmanager
def recording() -> Iterator[dict[str, Any]]:
    """The fields the call running on this thread attaches (:func:`attach`) inside the block."""
    attached: dict[str, Any] = {}
    token = _attached.set(attached)
    try:
        yield attached
    finally:
        _attached.reset(token)


def attach(**values: Any) -> None:
    """Add ``values`` to the running call's log line (nothing outside a :func:`recording`).
    The caller keeps them bounded and quoted."""
    attached = _attached.get()
    if attached is not None:
        attached.update(values)


def container_fields(ref: tuple[str, str] | None) -> dict[str, Any]:
    """``pod_uid`` and ``container`` of a ``(pod uid, container name)`` (none for None)."""
    if ref is None:
        return {}
    return {"pod_uid": quote(ref[0], style="bare"), "container": quote(ref[1], style="bare")}


def fields(
    request: object,
    response: object,
    attached: dict[str, Any] | None = None,
    error: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The log line's fields for a call: the request's pod and containers, the decision of
    ``response`` (None: there was no reply), what the servicer ``attached`` and, for an error
    status, its ``(reason, message)``."""
    out: dict[str, Any] = {}
    if isinstance(request, Message):
        _describe_request(request, out)
    if isinstance(response, Message):
        describe = _REPLIES.get(response.DESCRIPTOR.full_name)
        if describe is not None:
            describe(response, out)
    if attached:
        out.update(attached)
    if error is not None:
        out["reason"] = quote(error[0], style="bare")
        out["message"] = bounded_message(error[1])
    return out


def bounded_message(message: str) -> str:
    """``message`` for a log line: one line (control characters escaped), at most
    :data:`MAX_MESSAGE_BYTES` bytes."""
    return quote(message, style="bare", limit=MAX_MESSAGE_BYTES)


def names(values: Iterable[str], key: str, out: dict[str, Any], total: int) -> None:
    """``out[key]``: the first :data:`MAX_LISTED` of ``values`` (``total`` of them),
    quoted; ``out[key + "_omitted"]``: how many more there were."""
    listed: list[str] = []
    for value in values:
        if len(listed) == MAX_LISTED:
            break
        listed.append(quote(value, style="bare"))
    out[key] = listed
    if total > len(listed):
        out[f"{key}_omitted"] = total - len(listed)


def _describe_request(request: Message, out: dict[str, Any]) -> None:
    by_name = request.DESCRIPTOR.fields_by_name
    pod = getattr(request, "pod", None) if "pod" in by_name else None
    if isinstance(pod, Message) and pod.DESCRIPTOR.full_name == "numamem.v1.Pod":
        p: Any = pod
        out["pod_uid"] = quote(p.uid, style="bare")
        if p.namespace or p.name:
            out["pod"] = quote(f"{p.namespace}/{p.name}", style="bare")
        total = len(p.init_containers) + len(p.containers)
        everyone = (c.name for group in (p.init_containers, p.containers) for c in group)
        names(everyone, "containers", out, total)
    for name in ("pod_uid", "container_name", "container_id"):
        if name in by_name:
            value = getattr(request, name)
            if isinstance(value, str) and value:
                out[name.replace("container_name", "container")] = quote(value, style="bare")
    if request.DESCRIPTOR.full_name == "numamem.v1.SyncActivePodsRequest":
        out["active_pods"] = len(getattr(request, "pods"))  # noqa: B009 - a proto field


def _nodes(*block_lists: Iterable[Any]) -> list[int]:
    """The NUMA nodes of ``block_lists`` (MemoryBlock messages), ascending, at most
    :data:`MAX_NODES`."""
    nodes = {n for blocks in block_lists for b in blocks for n in b.numa_affinity}
    return sorted(nodes)[:MAX_NODES]


def _refs(refs: Any, key: str, out: dict[str, Any]) -> None:
    """ContainerRef messages as ``uid/container`` names."""
    names((f"{r.pod_uid}/{r.container_name}" for r in refs), key, out, len(refs))


def _admit(reply: Any, out: dict[str, Any]) -> None:
    if reply.admitted:
        out["result"] = "admitted"
        out["nodes"] = _nodes(reply.pod_blocks, *(c.blocks for c in reply.containers))
    else:
        out["result"] = "rejected"
        out["reason"] = quote(reply.reason, style="bare")
        out["message"] = bounded_message(reply.message)


def _allocate(reply: Any, out: dict[str, Any]) -> None:
    out["result"] = "allocated"
    out["nodes"] = _nodes(reply.blocks)


def _allocate_pod(reply: Any, out: dict[str, Any]) -> None:
    out["result"] = "allocated"
    out["nodes"] = _nodes(reply.pod_blocks.blocks, *(c.blocks for c in reply.containers.values()))


def _remove(reply: Any, out: dict[str, Any]) -> None:
    out["result"] = "removed" if reply.found else "not_found"


def _release(reply: Any, out: dict[str, Any]) -> None:
    out["result"] = "released"
    _refs(reply.released, "released", out)


def _sync(reply: Any, out: dict[str, Any]) -> None:
    out["result"] = "synced"
    _refs(reply.removed, "removed", out)


def _resize(reply: Any, out: dict[str, Any]) -> None:
    action = reply.DESCRIPTOR.fields_by_name["action"].enum_type.values_by_number.get(reply.action)
    name = action.name if action is not None else str(reply.action)
    out["result"] = name.removeprefix("RESIZE_").lower()
    out["nodes"] = sorted(reply.numa_nodes)[:MAX_NODES]
    out["memory"] = reply.memory
    if reply.pod_level:
        out["pod_memory"] = reply.pod_memory
    if reply.affinity_changed:
        out["previous_nodes"] = sorted(reply.previous_numa_nodes)[:MAX_NODES]


_REPLIES = {
    "numamem.v1.AdmitResponse": _admit,
    "numamem.v1.AllocateResponse": _allocate,
    "numamem.v1.AllocatePodResponse": _allocate_pod,
    "numamem.v1.AddContainerResponse": lambda reply, out: out.update(result="added"),
    "numamem.v1.RemoveContainerResponse": _remove,
    "numamem.v1.ReleasePodResponse": _release,
    "numamem.v1.SyncActivePodsResponse": _sync,
    "numamem.v1.ResizeResponse": _resize,
}
"""The decision each reply type carries, by the reply's full message name."""
