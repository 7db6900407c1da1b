"""The metric store behind ``GetContainerMetric`` (katalyst ``pkg/util/metric`` MetricStore).

Keyed pod uid -> container name -> metric name; every value carries the time
it was sampled. Errors keep katalyst's current texts: a pod or container with
no metrics is ``[MetricStore] empty map, ...``, a missing metric is
``[MetricStore] load value failed, ...`` (both NOT_FOUND), and a value older
than the insurance period is ``metric data expired`` (FAILED_PRECONDITION).

Thread-safe: one lock; the collector replaces a container's whole map at once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from numamem.errors import FailedPreconditionError, NotFoundError, quote

MIN_INSURANCE_NS = 60 * 10**9


@dataclass(frozen=True)
class MetricValue:
    value: float
    time_ns: int
    """Unix nanoseconds of the sample; 0 = no time (never expires)."""


def insurance_period_ns(seconds: float) -> int:
    """``MetricInsurancePeriod``: 0 disables the check; anything below 60 s is raised to 60 s."""
    if seconds <= 0:
        return 0
    return max(int(seconds * 10**9), MIN_INSURANCE_NS)


class MetricStore:
    def __init__(self, insurance_ns: int = 0) -> None:
        self.insurance_ns = insurance_ns
        self._lock = threading.Lock()
        self._containers: dict[tuple[str, str], dict[str, MetricValue]] = {}
        self._node: dict[str, MetricValue] = {}

    def set_container_metrics(
        self, pod_uid: str, container_name: str, values: Mapping[str, MetricValue]
    ) -> None:
        """Replace every metric of one container."""
        with self._lock:
            self._containers[(pod_uid, container_name)] = dict(values)

    def delete_container(self, pod_uid: str, container_name: str) -> None:
        with self._lock:
            self._containers.pop((pod_uid, container_name), None)

    def retain(self, keys: set[tuple[str, str]]) -> None:
        """Drop the metrics of every container not in ``keys``."""
        with self._lock:
            for key in [k for k in self._containers if k not in keys]:
                del self._containers[key]

    def containers(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._containers)

    def get_container_metric(
        self, pod_uid: str, container_name: str, metric: str, now_ns: int
    ) -> MetricValue:
        with self._lock:
            values = self._containers.get((pod_uid, container_name))
            value = None if values is None else values.get(metric)
        where = (
            f"metric={quote(metric, style='bare')}, podUID={quote(pod_uid, style='bare')}, "
            f"containerName={quote(container_name, style='bare')}"
        )
        if values is None:
            raise NotFoundError(f"[MetricStore] empty map, {where}")
        if value is None:
            raise NotFoundError(f"[MetricStore] load value failed, {where}")
        self._check_age(value, now_ns)
        return value

    def set_node_metrics(self, values: Mapping[str, MetricValue]) -> None:
        with self._lock:
            self._node = dict(values)

    def get_node_metric(self, metric: str, now_ns: int) -> MetricValue:
        with self._lock:
            value = self._node.get(metric)
        if value is None:
            raise NotFoundError(
                f"[MetricStore] load value failed, metric={quote(metric, style='bare')}"
            )
        self._check_age(value, now_ns)
        return value

    def _check_age(self, value: MetricValue, now_ns: int) -> None:
        if self.insurance_ns and value.time_ns and now_ns - value.time_ns > self.insurance_ns:
            raise FailedPreconditionError("metric data expired")
