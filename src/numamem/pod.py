"""The parts of a Kubernetes Pod that resource managers look at, and GetPodQOS.

A :class:`Pod` carries what the kubelet's memory and topology managers read:
uid, names, init and app containers with their requests, limits and restart
policy, the pod-level ``spec.resources`` (KEP-2837) and an optional QoS class
(``status.qosClass``). Instances are immutable and hashable by identity-free
value; build them with :func:`with_defaulted_requests` (and, for pod-level
resources, :func:`with_defaulted_pod_resources`) to apply the API server's
defaulting before QoS is computed.

With pod-level resources set, the API server's QoS rule reads them instead of
the containers' (``ComputePodQOS`` with ``PodLevelResources`` on).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from numamem.errors import quote
from numamem.quantity import Quantity

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"
QOS_CLASSES = (GUARANTEED, BURSTABLE, BEST_EFFORT)
RESTART_ALWAYS = "Always"
_QOS_RESOURCES = ("cpu", "memory")
CPU = "cpu"
MEMORY = "memory"
HUGEPAGES_PREFIX = "hugepages-"


def is_supported_pod_level_resource(name: str) -> bool:
    """``IsSupportedPodLevelResource``: cpu, memory and hugepages of any size."""
    return name in _QOS_RESOURCES or name.startswith(HUGEPAGES_PREFIX)


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    requests: Mapping[str, Quantity] = field(default_factory=dict)
    limits: Mapping[str, Quantity] = field(default_factory=dict)
    restart_policy: str = ""

    @property
    def restartable(self) -> bool:
        """An init container with ``restartPolicy: Always`` is a sidecar."""
        return self.restart_policy == RESTART_ALWAYS


@dataclass(frozen=True, slots=True)
class Pod:
    uid: str
    namespace: str = ""
    name: str = ""
    init_containers: tuple[Container, ...] = ()
    containers: tuple[Container, ...] = ()
    qos_class: str = ""
    requests: Mapping[str, Quantity] = field(default_factory=dict)
    """``spec.resources.requests``: the pod-level requests (KEP-2837); empty when unset."""
    limits: Mapping[str, Quantity] = field(default_factory=dict)
    """``spec.resources.limits``: the pod-level limits; empty when unset."""
    _computed_qos: str = field(default="", init=False, compare=False, repr=False)
    """:func:`pod_qos` memoised (the pod is immutable); not part of the pod's value."""

    def all_containers(self) -> Iterator[Container]:
        """Init containers in spec order, then app containers."""
        yield from self.init_containers
        yield from self.containers

    def container(self, name: str) -> Container | None:
        for c in self.all_containers():
            if c.name == name:
                return c
        return None

    def container_names(self) -> frozenset[str]:
        return frozenset(c.name for c in self.all_containers())

    @property
    def pod_level_resources_set(self) -> bool:
        """``IsPodLevelResourcesSet``: a supported resource in the pod-level requests or limits."""
        return any(is_supported_pod_level_resource(n) for n in (*self.requests, *self.limits))

    def is_regular_init_container(self, name: str) -> bool:
        """``isRegularInitContainer``: an init container that is not a sidecar."""
        for c in self.init_containers:
            if c.name == name:
                return not c.restartable
        return False


def with_defaulted_requests(container: Container) -> Container:
    """API defaulting: every resource with a limit but no request gets request = limit."""
    missing = {k: v for k, v in container.limits.items() if k not in container.requests}
    if not missing:
        return container
    requests = dict(container.requests)
    requests.update(missing)
    return Container(
        container.name, MappingProxyType(requests), container.limits, container.restart_policy
    )


def is_container_equivalent_guaranteed(container: Container) -> bool:
    """``IsContainerEquivalentQOSGuaranteed``: the container's own cpu and memory requests are
    set (non-zero) and equal to its limits, which is what an exclusive allocation from a
    pod-level budget needs."""
    for name in _QOS_RESOURCES:
        req = container.requests.get(name)
        lim = container.limits.get(name)
        if req is None or req.is_zero() or lim is None or lim.value != req.value:
            return False
    return True


def aggregate_container_resources(pod: Pod, limits: bool = False) -> dict[str, Quantity]:
    """``AggregateContainerRequests`` (or ``...Limits``): per resource the larger of what the
    long-running containers (app containers and sidecars) take together and what any init
    container takes with the sidecars started before it."""
    total: dict[str, Quantity] = {}
    for ctr in pod.containers:
        _add_into(total, ctr.limits if limits else ctr.requests)
    sidecars: dict[str, Quantity] = {}
    init_max: dict[str, Quantity] = {}
    for ctr in pod.init_containers:
        own = ctr.limits if limits else ctr.requests
        if ctr.restartable:
            _add_into(total, own)
            _add_into(sidecars, own)
            current = dict(sidecars)
        else:
            current = dict(own)
            _add_into(current, sidecars)
        _max_into(init_max, current)
    _max_into(total, init_max)
    return total


def _add_into(target: dict[str, Quantity], values: Mapping[str, Quantity]) -> None:
    for name, q in values.items():
        target[name] = target[name].add(q) if name in target else q


def _max_into(target: dict[str, Quantity], values: Mapping[str, Quantity]) -> None:
    for name, q in values.items():
        if name not in target or q.value > target[name].value:
            target[name] = q


def with_defaulted_pod_resources(pod: Pod) -> Pod:
    """The API server's pod-level defaulting (``SetDefaults_Pod`` with ``PodLevelResources``):
    ``defaultHugePagePodLimits`` (a hugepage limit of the containers becomes the pod's when the
    pod sets neither its limit nor its request), then, when the pod sets limits,
    ``defaultPodRequests`` (a cpu or memory request the pod does not set is the containers'
    aggregate request when they request any; any other missing request is the limit).

    Only pods that set pod-level resources change. The newest API servers also default
    pod-level limits from the containers' when only requests are set (``defaultPodLimits``);
    that is not applied here: whether a released version does could not be verified."""
    if not pod.requests and not pod.limits:
        return pod
    limits = dict(pod.limits)
    for name, q in aggregate_container_resources(pod, limits=True).items():
        if name.startswith(HUGEPAGES_PREFIX) and name not in pod.requests and name not in limits:
            limits[name] = q
    requests = dict(pod.requests)
    if limits:
        for name, q in aggregate_container_resources(pod).items():
            if name in (CPU, MEMORY) and name not in requests:
                requests[name] = q
        for name, q in limits.items():
            if name not in requests and is_supported_pod_level_resource(name):
                requests[name] = q
    if requests == dict(pod.requests) and limits == dict(pod.limits):
        return pod
    return Pod(
        pod.uid,
        pod.namespace,
        pod.name,
        pod.init_containers,
        pod.containers,
        pod.qos_class,
        MappingProxyType(requests),
        MappingProxyType(limits),
    )


def pod_qos(pod: Pod) -> str:
    """``v1qos.GetPodQOS``: ``status.qosClass`` if set, else computed from cpu and memory."""
    if pod.qos_class:
        return pod.qos_class
    if not pod._computed_qos:
        object.__setattr__(pod, "_computed_qos", compute_pod_qos(pod))
    return pod._computed_qos


def not_guaranteed_because(pod: Pod) -> str:
    """Where ``pod`` stops being Guaranteed, for a message: the first cpu or memory
    (pod-level when it sets pod-level resources, as :func:`compute_pod_qos` decides) without
    a limit or whose request differs from its limit, else its given ``status.qosClass``; ""
    when neither."""
    if pod.requests or pod.limits:
        places = [("spec.resources", pod.requests, pod.limits)]
    else:
        places = [
            (f"container {quote(c.name)}", c.requests, c.limits) for c in pod.all_containers()
        ]
    for where, requests, limits in places:
        for name in (CPU, MEMORY):
            request, limit = requests.get(name), limits.get(name)
            if limit is None or limit.value <= 0:
                return f"{where} has no {name} limit"
            if request is not None and request.value != limit.value:
                return f"{where} requests {name} {request} but limits it to {limit}"
    if pod.qos_class and pod.qos_class != GUARANTEED:
        return f"its status.qosClass is {quote(pod.qos_class)}"
    return ""


def compute_pod_qos(pod: Pod, pod_level: bool = True) -> str:
    """``ComputePodQOS``: only cpu and memory count; ephemeral containers are not modelled.

    With ``pod_level`` (the ``PodLevelResources`` gate) and pod-level resources given, those
    decide the class and the containers' do not."""
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
    if pod_level and (pod.requests or pod.limits):
        for name, q in pod.requests.items():
            if name in _QOS_RESOURCES and q.value > 0:
                requests[name] = q
        for name, q in pod.limits.items():
            if name in _QOS_RESOURCES and q.value > 0:
                limits[name] = q
        if pod.limits and not set(limits).issuperset(_QOS_RESOURCES):
            guaranteed = False
        return _qos_class(requests, limits, guaranteed)
    for container in (*pod.containers, *pod.init_containers):
        for name, q in container.requests.items():
            if name in _QOS_RESOURCES and q.value > 0:
                requests[name] = q.add(requests[name]) if name in requests else q
        found: set[str] = set()
        for name, q in container.limits.items():
            if name in _QOS_RESOURCES and q.value > 0:
                found.add(name)
                limits[name] = q.add(limits[name]) if name in limits else q
        if not found.issuperset(_QOS_RESOURCES):
            guaranteed = False
    return _qos_class(requests, limits, guaranteed)


def _qos_class(
    requests: Mapping[str, Quantity], limits: Mapping[str, Quantity], guaranteed: bool
) -> str:
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed:
        for name, req in requests.items():
            lim = limits.get(name)
            if lim is None or lim.value != req.value:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE
