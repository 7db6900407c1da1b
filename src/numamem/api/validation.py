"""Pods and containers at the gRPC edge: proto messages -> core types, or INVALID_ARGUMENT.

Every message names the field as a path (``pod.containers[1].requests["memory"]``)
and the bad value. Checks mirror what the Kubernetes API server guarantees the
kubelet (non-empty unique names, parseable non-negative quantities, requests <=
limits, a QoS class that matches the resources, hugepage requests == limits,
``restartPolicy: Always`` only on init containers) plus what numamem itself
needs (known hugepage sizes, existing NUMA nodes, bounded sizes). Requests
missing for a limited resource default to the limit, as the API server's
defaulting does. Hugepage rules apply to Guaranteed pods only: the memory
manager never looks at other pods (see :func:`pod_from_proto`).

Pod-level resources (``requests``/``limits`` of the Pod, KEP-2837) get the API
server's defaulting and rules: only cpu, memory and hugepages, requests <= limits,
requests that cover the containers' aggregate requests and limits that cover each
app container's limit (so that a pod-level budget is never smaller than what its
containers take exclusively).

Also the checks every edge module shares (:func:`check_string`, :func:`container_in_pod`).
The other providers' hints and an affinity are converted by :mod:`numamem.api.hintinput`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numamem.api.converted import Remembered
from numamem.config.model import FeatureGates, Limits
from numamem.errors import InvalidArgumentError, LimitExceededError, QuantityError, quote
from numamem.memtypes import is_memory_resource
from numamem.pod import (
    GUARANTEED,
    QOS_CLASSES,
    RESTART_ALWAYS,
    Container,
    Pod,
    aggregate_container_resources,
    compute_pod_qos,
    is_supported_pod_level_resource,
    with_defaulted_pod_resources,
    with_defaulted_requests,
)
from numamem.quantity import Quantity, parse_quantity
from numamem.topology import Machine
from numamem.v1 import memorymanager_pb2

MAX_STRING = 1024
MAX_QUANTITY = 64
MAX_RESOURCES = 64


def check_string(value: str, field: str, *, required: bool = True) -> str:
    if required and not value:
        raise InvalidArgumentError(f"{field}: must not be empty")
    if len(value) > MAX_STRING:
        raise InvalidArgumentError(f"{field}: longer than {MAX_STRING} characters ({len(value)})")
    if "\x00" in value:
        raise InvalidArgumentError(f"{field}: must not contain NUL characters")
    return value


def _quantities(values: Mapping[str, str], field: str) -> dict[str, Quantity]:
    if len(values) > MAX_RESOURCES:
        raise InvalidArgumentError(f"{field}: more than {MAX_RESOURCES} resources ({len(values)})")
    result = {}
    for name, text in sorted(values.items()):
        check_string(name, f"{field} resource name")

        def where(name: str = name) -> str:  # only a refusal says where
            return f"{field}[{quote(name, style='go')}]"

        if len(text) > MAX_QUANTITY:
            raise InvalidArgumentError(f"{where()}: quantity longer than {MAX_QUANTITY} characters")
        try:
            q = parse_quantity(text)
        except QuantityError as err:
            raise InvalidArgumentError(
                f"{where()}: {quote(text)} is not a valid quantity: {err}"
            ) from err
        value = q.value
        if value < 0:
            raise InvalidArgumentError(f"{where()}: must not be negative, got {quote(text)}")
        if is_memory_resource(name) and (value.denominator != 1 or value >= 1 << 63):
            raise InvalidArgumentError(
                f"{where()}: {quote(text)} is not a whole number of bytes below 2^63"
            )
        result[name] = q
    return result


def _container(msg: memorymanager_pb2.Container, field: str, *, init: bool) -> Container:
    """Syntax: names, quantities, requests <= limits, the restart policy; defaults requests."""
    name = check_string(msg.name, f"{field}.name")
    requests = _quantities(msg.requests, f"{field}.requests")
    limits = _quantities(msg.limits, f"{field}.limits")
    if msg.restart_policy and msg.restart_policy != RESTART_ALWAYS:
        raise InvalidArgumentError(
            f"{field}.restart_policy: {quote(msg.restart_policy)} is not supported; "
            'only "Always" (a sidecar) or empty'
        )
    if msg.restart_policy and not init:
        raise InvalidArgumentError(f"{field}.restart_policy: only init containers may set it")
    _within_limits(requests, limits, field)
    return with_defaulted_requests(Container(name, requests, limits, msg.restart_policy))


def _within_limits(
    requests: Mapping[str, Quantity], limits: Mapping[str, Quantity], field: str
) -> None:
    """The API server's rule, for a container's resources and a pod's: each request at most
    its limit."""
    for res_name, req in requests.items():
        lim = limits.get(res_name)
        if lim is not None and req.value > lim.value:
            raise InvalidArgumentError(
                f"{field}.requests[{quote(res_name, style='go')}]: {req} must be less than or "
                f"equal to the limit {lim}"
            )


class ConvertedContainers:
    """:func:`_container` remembered by the message's bytes: the pods of one workload repeat
    the same containers, and a container's conversion (quantities, requests against limits,
    defaulting) is most of a new pod's (pod_from_proto of a 3-container pod: 125-135 µs
    without this cache, 58-70 µs with it, over 3,000 pods of one shape). A refusal is
    not remembered (its message names the field), and the result does not depend on where
    the container stands. Bounded (:class:`~numamem.api.converted.Remembered`); the
    converted containers are immutable and shared; thread-safe."""

    def __init__(self) -> None:
        self._app: Remembered[Container] = Remembered(1024, 4096)
        self._init: Remembered[Container] = Remembered(1024, 4096)

    def get(self, msg: memorymanager_pb2.Container, field: str, *, init: bool) -> Container:
        return (self._init if init else self._app).get(
            msg, lambda: _container(msg, field, init=init)
        )


CONTAINERS = ConvertedContainers()
"""The process's converted containers (pure conversions: one cache serves every server)."""


def _check_hugepages(container: Container, field: str, known: Sequence[str]) -> None:
    """What the memory manager needs of a Guaranteed container's hugepages.

    Known sizes, and requests equal to limits (the API server's rule for every
    pod; the kubelet's Static policy pins the request).
    """
    for res_name in (*container.requests, *container.limits):
        if res_name.startswith("hugepages-") and res_name not in known:
            sizes = ", ".join(known) or "none"
            raise InvalidArgumentError(
                f"{field}: {quote(res_name, style='bare')} is not a hugepage size of this "
                f"machine (it has: {sizes})"
            )
    for res_name, req in container.requests.items():
        lim = container.limits.get(res_name)
        if res_name.startswith("hugepages-") and lim is not None and req.value != lim.value:
            raise InvalidArgumentError(
                f"{field}.requests[{quote(res_name, style='go')}]: hugepage requests must equal "
                f"limits ({req} != {lim})"
            )


def _pod_level(pod: Pod, field: str) -> None:
    """The API server's rules on pod-level resources (``validatePodResources`` and
    ``validatePodResourceConsistency``), after its defaulting."""
    for kind, values in (("requests", pod.requests), ("limits", pod.limits)):
        for res_name in values:
            if not is_supported_pod_level_resource(res_name):
                raise InvalidArgumentError(
                    f"{field}.{kind}[{quote(res_name, style='go')}]: not a pod-level resource; the "
                    "pod level takes cpu, memory and hugepages-<size>"
                )
    _within_limits(pod.requests, pod.limits, field)
    for res_name, aggregate in aggregate_container_resources(pod).items():
        pod_req = pod.requests.get(res_name)
        if pod_req is not None and aggregate.value > pod_req.value:
            raise InvalidArgumentError(
                f"{field}.requests[{quote(res_name, style='go')}]: {pod_req} must be greater than or "
                f"equal to aggregate container requests of {aggregate}"
            )
    for i, ctr in enumerate(pod.containers):
        for res_name, ctr_limit in ctr.limits.items():
            lim = pod.limits.get(res_name)
            if lim is not None and ctr_limit.value > lim.value:
                raise InvalidArgumentError(
                    f"{field}.containers[{i}].limits[{quote(res_name, style='go')}]: {ctr_limit} "
                    f"must be less than or equal to pod limits of {lim}"
                )


def pod_from_proto(
    msg: memorymanager_pb2.Pod,
    machine: Machine,
    limits: Limits,
    field: str = "pod",
    gates: FeatureGates | None = None,
) -> Pod:
    """A validated core :class:`Pod`; raises InvalidArgumentError or LimitExceededError.

    QoS is computed first (after request defaulting), as the API server does:
    a given ``qos_class`` that contradicts it is refused, and only Guaranteed
    pods, the memory manager's business, have their hugepages checked. A
    Burstable pod whose hugepage requests differ from its limits is therefore
    accepted and, as in the kubelet, gets no hints and no allocation.
    """
    uid = check_string(msg.uid, f"{field}.uid")
    check_string(msg.namespace, f"{field}.namespace", required=False)
    check_string(msg.name, f"{field}.name", required=False)
    count = len(msg.init_containers) + len(msg.containers)
    if count > limits.max_containers_per_pod:
        raise LimitExceededError(
            f"{field}: {count} containers exceed the limit of {limits.max_containers_per_pod} per pod "
            "(--max-containers-per-pod)"
        )
    if not msg.containers:
        raise InvalidArgumentError(f"{field}.containers: a pod needs at least one container")
    if msg.qos_class and msg.qos_class not in QOS_CLASSES:
        raise InvalidArgumentError(
            f"{field}.qos_class: {quote(msg.qos_class)} is not one of {', '.join(QOS_CLASSES)}"
        )
    named = [
        *(
            (
                f"{field}.init_containers[{i}]",
                CONTAINERS.get(c, f"{field}.init_containers[{i}]", init=True),
            )
            for i, c in enumerate(msg.init_containers)
        ),
        *(
            (f"{field}.containers[{i}]", CONTAINERS.get(c, f"{field}.containers[{i}]", init=False))
            for i, c in enumerate(msg.containers)
        ),
    ]
    seen: set[str] = set()
    for _, c in named:
        if c.name in seen:
            raise InvalidArgumentError(f"{field}: duplicate container name {quote(c.name)}")
        seen.add(c.name)
    inits = tuple(c for _, c in named[: len(msg.init_containers)])
    apps = tuple(c for _, c in named[len(msg.init_containers) :])
    pod = Pod(uid, init_containers=inits, containers=apps)
    if msg.requests or msg.limits:
        pod = _with_pod_resources(msg, pod, field)
    computed = compute_pod_qos(pod, (gates or FeatureGates()).pod_level_resources)
    # A pod that sets pod-level resources exists only where the API server's PodLevelResources
    # is on, so its status.qosClass is computed from them whatever this node's gate says;
    # the kubelet reads that class (GetPodQOS) and, with its gates off, skips the pod.
    given = {computed}
    if pod.pod_level_resources_set:
        given.add(compute_pod_qos(pod, True))
    if msg.qos_class and msg.qos_class not in given:
        raise InvalidArgumentError(
            f"{field}.qos_class: {quote(msg.qos_class)} contradicts the requests and limits, which make "
            f"the pod {computed}; leave qos_class empty or send the pod's status.qosClass"
        )
    computed = msg.qos_class or computed
    if computed == GUARANTEED:
        for where, c in named:
            _check_hugepages(c, where, machine.hugepage_resources)
        if pod.requests or pod.limits:
            _check_hugepages(
                Container("", pod.requests, pod.limits), field, machine.hugepage_resources
            )
    return Pod(uid, msg.namespace, msg.name, inits, apps, computed, pod.requests, pod.limits)


def _with_pod_resources(msg: memorymanager_pb2.Pod, pod: Pod, field: str) -> Pod:
    """``pod`` with the message's pod-level resources, defaulted and checked (:func:`_pod_level`)."""
    requests = _quantities(msg.requests, f"{field}.requests")
    limits = _quantities(msg.limits, f"{field}.limits")
    pod = with_defaulted_pod_resources(
        Pod(pod.uid, "", "", pod.init_containers, pod.containers, "", requests, limits)
    )
    _pod_level(pod, field)
    return pod


class ConvertedPods:
    """:func:`pod_from_proto` remembered by the message's bytes (an agent sends the same pod
    with each call for each of its containers: Allocate, AddContainer, hints), in a
    :class:`~numamem.api.converted.Remembered` of :data:`MAX_ENTRIES` pods of at most
    :data:`MAX_KEY_BYTES` serialized bytes. A refusal is not remembered; the converted pods
    are immutable and shared; thread-safe."""

    MAX_ENTRIES = 256
    MAX_KEY_BYTES = 8192

    def __init__(self, machine: Machine, limits: Limits, gates: FeatureGates | None = None) -> None:
        self.machine, self.limits, self.gates = machine, limits, gates
        self._pods: Remembered[Pod] = Remembered(self.MAX_ENTRIES, self.MAX_KEY_BYTES)

    def get(self, msg: memorymanager_pb2.Pod) -> Pod:
        return self._pods.get(
            msg, lambda: pod_from_proto(msg, self.machine, self.limits, gates=self.gates)
        )


def container_in_pod(pod: Pod, name: str, field: str = "container_name") -> str:
    check_string(name, field)
    if pod.container(name) is None:
        raise InvalidArgumentError(
            f"{field}: {quote(name)} is not a container of pod {quote(pod.uid)}"
        )
    return name
