"""Prometheus metrics on ``--metrics-port`` (TCP) or ``--metrics-socket`` (HTTP on a unix socket).

Only ``/metrics`` is served; every other path is 404.

State gauges are computed at scrape time from the committed (immutable) states,
so operations pay nothing for them. Events are counted where they happen:
RPCs (the interceptor's observer), admissions, checkpoint writes, collector
rounds. All metrics live in the daemon's own registry (not the global one).

| metric | labels |
|---|---|
| ``numamem_build_info`` (1) | version, commit, python (:func:`numamem.version.build_info`) |
| ``numamem_numa_memory_bytes`` | node, resource, kind (total, system_reserved, allocatable, reserved, free) |
| ``numamem_numa_assignments`` | node |
| ``numamem_numa_group_info`` | node, group (the ``cells``, e.g. ``0,1``) |
| ``numamem_memory_manager_pods``, ``numamem_memory_manager_containers`` | |
| ``numamem_admissions_total`` | result (admitted, rejected), reason |
| ``numamem_rpc_requests_total`` | method, code |
| ``numamem_rpc_duration_seconds`` (histogram) | method, code |
| ``numamem_checkpoint_write_duration_seconds`` (histogram), ``numamem_checkpoint_write_failures_total`` | file (``memory_manager_state``; ``sys_advisor_state.journal`` per commit, ``sys_advisor_state`` per snapshot) |
| ``numamem_memory_drift_bytes`` | node, resource (at the last start: memory now minus stored) |
| ``numamem_metacache_entries`` | kind (containers, pods, pools, regions) |
| ``numamem_collector_sample_duration_seconds`` (histogram), ``numamem_collector_errors_total`` | |
| ``numamem_container_numa_memory_bytes`` | namespace, pod, uid, container, node, type |
| ``numamem_container_memory_outside_affinity_bytes``, ``numamem_container_cpuset_mems_mismatch`` | namespace, pod, uid, container |
| ``numamem_container_cpuset_mems_not_enforced`` | namespace, pod, uid, container, reason (contested, parent_disallows, stopped) |
| ``numamem_cpuset_mems_writes_total`` | result (ok, failed) |

The ``numamem_container_*`` gauges cover only pinned containers that the last
collector round measured (bounded by the memory manager's pods), with the types
of :data:`numamem.api.residency.RESIDENCY_TYPES` the kernel reports and each
``hugetlb_<size>``.
"""

from __future__ import annotations

import os
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import Collector

from numamem.api.residency import ResidencyMetrics, ResidencyView
from numamem.api.sockets import BoundSocket
from numamem.errors import PATH_QUOTE_BYTES, StartupError, quote
from numamem.memorymanager.manager.writes import Manager
from numamem.metacache.cache import MetaCache
from numamem.socketpath import prepare_socket_path
from numamem.version import build_info

_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
)


class Metrics:
    """The daemon's registry and event metrics. Thread-safe (prometheus_client is)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.rpc_requests = Counter(
            "numamem_rpc_requests_total", "RPCs served", ["method", "code"], registry=self.registry
        )
        self.rpc_duration = Histogram(
            "numamem_rpc_duration_seconds",
            "RPC handling time",
            ["method", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.admissions = Counter(
            "numamem_admissions_total",
            "Pod admissions",
            ["result", "reason"],
            registry=self.registry,
        )
        self.checkpoint_duration = Histogram(
            "numamem_checkpoint_write_duration_seconds",
            "Atomic checkpoint write time",
            ["file"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.checkpoint_failures = Counter(
            "numamem_checkpoint_write_failures_total",
            "Failed checkpoint writes",
            ["file"],
            registry=self.registry,
        )
        self.collector_duration = Histogram(
            "numamem_collector_sample_duration_seconds",
            "Time of one metrics collection round",
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self.collector_errors = Counter(
            "numamem_collector_errors_total",
            "Container cgroups that could not be read",
            registry=self.registry,
        )
        Info(  # exposed as numamem_build_info{...} 1
            "numamem_build", "The running numamem (numamem.version)", registry=self.registry
        ).info(build_info())

    def observe_rpc(self, method: str, code: str, seconds: float) -> None:
        self.rpc_requests.labels(method, code).inc()
        self.rpc_duration.labels(method, code).observe(seconds)

    def observe_admission(self, admitted: bool, reason: str) -> None:
        self.admissions.labels("admitted" if admitted else "rejected", reason).inc()

    def checkpoint_observer(self, file: str) -> Callable[[float, bool], None]:
        def observe(seconds: float, ok: bool) -> None:
            if ok:
                self.checkpoint_duration.labels(file).observe(seconds)
            else:
                self.checkpoint_failures.labels(file).inc()

        return observe

    def observe_collector(self, seconds: float, errors: int) -> None:
        self.collector_duration.observe(seconds)
        if errors:
            self.collector_errors.inc(errors)

    def add_state(
        self, manager: Callable[[], Manager | None], cache: Callable[[], MetaCache | None]
    ) -> None:
        self.registry.register(_StateCollector(manager, cache))

    def add_residency(self, residency: ResidencyView) -> None:
        self.registry.register(ResidencyMetrics(residency))


class _StateCollector(Collector):
    """Gauges read from the committed states at scrape time."""

    def __init__(
        self, manager: Callable[[], Manager | None], cache: Callable[[], MetaCache | None]
    ) -> None:
        self._manager = manager
        self._cache = cache

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        manager = self._manager()
        if manager is not None:
            state = manager.reader()
            memory = GaugeMetricFamily(
                "numamem_numa_memory_bytes",
                "Memory per NUMA node, type and kind",
                labels=["node", "resource", "kind"],
            )
            assignments = GaugeMetricFamily(
                "numamem_numa_assignments", "Memory blocks on the node", labels=["node"]
            )
            groups = GaugeMetricFamily(
                "numamem_numa_group_info", "The node's NUMA group (cells)", labels=["node", "group"]
            )
            for node_id, node in sorted(state.machine_view().items()):
                if node is None:
                    continue
                n = str(node_id)
                for name, t in sorted((node.memory_map or {}).items()):
                    for kind, value in (
                        ("total", t.total),
                        ("system_reserved", t.system_reserved),
                        ("allocatable", t.allocatable),
                        ("reserved", t.reserved),
                        ("free", t.free),
                    ):
                        memory.add_metric([n, name, kind], value)
                assignments.add_metric([n], node.number_of_assignments)
                groups.add_metric([n, ",".join(map(str, node.cells or []))], 1)
            yield memory
            yield assignments
            yield groups
            yield GaugeMetricFamily(
                "numamem_memory_manager_pods", "Pods with memory state", value=state.pod_count()
            )
            yield GaugeMetricFamily(
                "numamem_memory_manager_containers",
                "Containers with memory state",
                value=state.container_count(),
            )
            drift = GaugeMetricFamily(
                "numamem_memory_drift_bytes",
                "At the last start: the node's memory now minus what the stored state had "
                "(TotalMemSize per type; the state was re-baselined when it is not 0)",
                labels=["node", "resource"],
            )
            for (node_id, name), value in sorted(getattr(manager.policy, "drift", {}).items()):
                drift.add_metric([str(node_id), name], value)
            yield drift
        cache = self._cache()
        if cache is not None:
            s = cache.state()
            entries = GaugeMetricFamily(
                "numamem_metacache_entries", "Metacache entries", labels=["kind"]
            )
            entries.add_metric(["containers"], sum(len(c) for c in s.pods.values()))
            entries.add_metric(["pods"], len(s.pods))
            entries.add_metric(["pools"], len(s.pools))
            entries.add_metric(["regions"], len(s.regions))
            yield entries


METRICS_PATH = "/metrics"


def metrics_handler(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    """prometheus_client's handler for ``/metrics`` (query filters and gzip included); every
    other path is 404. (prometheus_client answers every path with the metrics, so ``/`` and
    ``/healthz`` looked like working health endpoints while saying nothing about health.)"""
    base: type[BaseHTTPRequestHandler] = MetricsHandler.factory(registry)

    class Handler(base):  # type: ignore[misc,valid-type]
        def do_GET(self) -> None:
            if urlparse(self.path).path != METRICS_PATH:
                body = f"numamem serves {METRICS_PATH} only\n".encode()
                self.send_response(404)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

    return Handler


class _TCPHTTPServer(ThreadingHTTPServer):
    daemon_threads = True


class _TCP6HTTPServer(_TCPHTTPServer):
    address_family = socket.AF_INET6


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[Any, Any]:
        request, _ = super().get_request()
        return request, ("unix", 0)  # BaseHTTPRequestHandler wants a (host, port) client address


class MetricsComponent:
    """Wires the metrics to the other components and serves them (only when enabled).

    A component with an ``observe_rpc`` method gets every RPC from the daemon's
    interceptor.
    """

    service_names: Sequence[str] = ()

    def __init__(
        self,
        address: str,
        port: int | None,
        socket_path: str | None,
        memory: Any,
        metacache: Any,
        residency: ResidencyView | None = None,
    ) -> None:
        self.metrics = Metrics()
        self._address, self._port, self._socket = address, port, socket_path
        self._memory, self._metacache = memory, metacache
        self._server: MetricsServer | None = None
        self.metrics.add_state(lambda: memory.manager, lambda: metacache.cache)
        if residency is not None:
            self.metrics.add_residency(residency)

    def observe_rpc(self, method: str, code: str, seconds: float) -> None:
        self.metrics.observe_rpc(method, code, seconds)

    def register(self, server: Any) -> None:
        return None

    def watch_durability(self, report: Callable[[str, str | None], None]) -> None:
        return None

    def load(self) -> None:
        """Listen now: a port that is taken refuses the start before anything is written."""
        self._server = MetricsServer(self.metrics, self._address, self._port, self._socket)

    def start(self) -> None:
        m = self.metrics
        self._memory.manager_store_observers().append(m.checkpoint_observer("memory_manager_state"))
        if self._metacache.persister is not None:
            persister = self._metacache.persister
            persister.observers.append(m.checkpoint_observer(persister.journal_path.name))
            persister.snapshot_observers.append(m.checkpoint_observer(persister.path.name))
        self._metacache.collector.observers.append(m.observe_collector)
        self._memory.servicer.on_admission = m.observe_admission

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


class MetricsServer:
    """Serves /metrics on a TCP port or a unix socket; stop() closes it."""

    def __init__(
        self, metrics: Metrics, address: str, port: int | None, socket_path: str | None
    ) -> None:
        self._stops: list[Callable[[], None]] = []
        handler = metrics_handler(metrics.registry)
        if port is not None:
            server_class = _TCP6HTTPServer if ":" in address else _TCPHTTPServer
            try:
                server = server_class((address, port), handler)
            except OSError as err:
                raise StartupError(
                    f"--metrics-address {address} --metrics-port {port}: cannot listen: "
                    f"{err.strerror}"
                ) from err
            tcp_thread = threading.Thread(
                target=server.serve_forever, name="metrics-tcp", daemon=True
            )
            tcp_thread.start()

            def stop_tcp() -> None:
                server.shutdown()
                server.server_close()
                tcp_thread.join(5)

            self._stops.append(stop_tcp)
        if socket_path is not None:
            prepare_socket_path(socket_path, "--metrics-socket")
            old = os.umask(0o117)
            try:
                unix = _UnixHTTPServer(socket_path, handler)
            except OSError as err:
                raise StartupError(
                    f"--metrics-socket {quote(socket_path, limit=PATH_QUOTE_BYTES)}: cannot listen: {err.strerror}"
                ) from err
            finally:
                os.umask(old)
            bound = BoundSocket(socket_path)
            thread = threading.Thread(target=unix.serve_forever, name="metrics-unix", daemon=True)
            thread.start()

            def stop_unix() -> None:
                unix.shutdown()
                unix.server_close()
                bound.remove()  # only the socket bound here, not a newcomer's

            self._stops.append(stop_unix)

    def stop(self) -> None:
        for stop in self._stops:
            stop()
        self._stops = []
