"""The parts of a Kubernetes Pod that resource managers look at, and GetPodQOS.

A :class:`Pod` carries what the kubelet's memory and topology managers read:
uid, names, init and app containers with their requests, limits and restart
policy, and an optional QoS class (``status.qosClass``). Instances are
immutable and hashable by identity-free value; build them with
:func:`with_defaulted_requests` to apply the API server's defaulting
(a missing request defaults to the limit) before QoS is computed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from numamem.quantity import Quantity

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"
QOS_CLASSES = (GUARANTEED, BURSTABLE, BEST_EFFORT)
RESTART_ALWAYS = "Always"
_QOS_RESOURCES = ("cpu", "memory")


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


def pod_qos(pod: Pod) -> str:
    """``v1qos.GetPodQOS``: ``status.qosClass`` if set, else computed from cpu and memory."""
    if pod.qos_class:
        return pod.qos_class
    if not pod._computed_qos:
        object.__setattr__(pod, "_computed_qos", compute_pod_qos(pod))
    return pod._computed_qos


def compute_pod_qos(pod: Pod) -> str:
    """``ComputePodQOS``: only cpu and memory count; ephemeral containers are not modelled."""
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
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
