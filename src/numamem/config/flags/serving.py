"""The flags of how numamem serves and observes: the health, metrics and podresources
endpoints, logs, shutdown, the worker threads, and the container metrics collector's
sampling.

Part of :data:`numamem.config.flags.table.FLAGS`, in its order (``--help`` and
docs/configuration.md list them so).
"""

from __future__ import annotations

from numamem.config.flags.spec import Flag

SERVING: tuple[Flag, ...] = (
    Flag(
        "--health-port",
        "health_port",
        "TCP port serving only grpc.health.v1, for kubelet native gRPC probes",
        "off",
        kind="int",
        metavar="N",
        allowed=(1, 65535),
    ),
    Flag(
        "--health-address",
        "health_address",
        "IP address --health-port listens on (IPv6 too: ::1, [::]); the DaemonSet passes the pod "
        "IP for the kubelet's gRPC probe",
        "127.0.0.1",
        kind="address",
        metavar="IP",
    ),
    Flag(
        "--metrics-port",
        "metrics_port",
        "TCP port for Prometheus metrics (/metrics)",
        "off",
        kind="int",
        metavar="N",
        allowed=(1, 65535),
    ),
    Flag(
        "--metrics-address",
        "metrics_address",
        "IP address --metrics-port listens on (IPv6 too: ::1, [::])",
        "127.0.0.1",
        kind="address",
        metavar="IP",
    ),
    Flag(
        "--metrics-socket",
        "metrics_socket",
        "unix socket for Prometheus metrics over HTTP",
        "off",
        metavar="PATH",
    ),
    Flag(
        "--podresources-socket",
        "podresources_socket",
        "serve the kubelet's podresources v1 API (List, GetAllocatableResources, Get) with "
        "numamem's NUMA memory on this unix socket, for NFD topology-updater and RTE",
        "off",
        metavar="PATH",
    ),
    Flag(
        "--kubelet-podresources-socket",
        "kubelet_podresources_socket",
        "with --podresources-socket: merge in the kubelet's own podresources answers (CPUs, "
        "devices, dynamic resources) from this socket, e.g. "
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        "off",
        metavar="PATH",
    ),
    Flag(
        "--log-level",
        "log_level",
        "log level",
        "info",
        choices=("debug", "info", "warning", "error"),
    ),
    Flag(
        "--log-format",
        "log_format",
        "log format: JSON lines or a console renderer",
        "json",
        choices=("json", "console"),
    ),
    Flag(
        "--shutdown-grace",
        "shutdown_grace_seconds",
        "seconds in-flight RPCs may take to finish after SIGTERM/SIGINT",
        "5",
        kind="float",
        metavar="SECONDS",
        allowed=(0, 3600),
        unit="seconds",
    ),
    Flag(
        "--workers",
        "workers",
        "gRPC handler threads",
        "16",
        kind="int",
        metavar="N",
        allowed=(1, 1024),
    ),
    Flag(
        "--metric-interval",
        "metric_interval_seconds",
        "seconds between container metric samples",
        "10",
        kind="float",
        metavar="SECONDS",
        allowed=(0.1, 86400),
        unit="seconds",
    ),
    Flag(
        "--metric-insurance-period",
        "metric_insurance_period_seconds",
        "metrics older than this are an error (0 = never expire; values below 60 are raised to 60)",
        "0",
        kind="float",
        metavar="SECONDS",
        allowed=(0, 604800),
        unit="seconds",
    ),
)
