"""The ``numamem serve`` flags: one table for the argument parser, the YAML keys and the README.

Every problem is a :class:`~numamem.errors.ConfigError` with one line naming
the field (as the operator wrote it: ``--flag`` or ``fileField (in FILE)``) and
the bad value. Only syntax is checked here; rules that need the machine
(reservations versus NUMA nodes, topology-manager limits) are checked when the
memory manager and topology manager are built.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from numamem.config.model import (
    DEFAULT_EVICTION_HARD,
    DEFAULT_SOCKET,
    DEFAULT_STATE_DIR,
    MEMORY_MANAGER_POLICIES,
    TOPOLOGY_MANAGER_POLICIES,
    TOPOLOGY_MANAGER_SCOPES,
    Config,
)
from numamem.config.syntax import (
    merge_feature_gates,
    parse_eviction_hard,
    parse_feature_gates,
    parse_key_values,
    parse_reserved_memory,
    parse_reserved_resources,
)
from numamem.errors import ConfigError, quote


@dataclass(frozen=True, slots=True)
class Flag:
    """One ``numamem serve`` flag: its name, the Config attribute, a YAML key if kubelet has one."""

    name: str
    attr: str
    help: str
    default: str
    yaml_key: str | None = None
    kind: str = "str"  # str | int | float | bool | list | address
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    allowed: tuple[float, float] | None = None
    """For ``int`` and ``float`` flags: the smallest and the largest value accepted (the
    error names both). Every interval, timeout, count and size has one."""
    unit: str = ""
    """What the number counts, for the error (``seconds``, ``bytes``)."""


FLAGS: tuple[Flag, ...] = (
    Flag(
        "--socket",
        "socket",
        "unix socket to serve on (directory created 0750, socket 0660)",
        DEFAULT_SOCKET,
        metavar="PATH",
    ),
    Flag(
        "--state-dir",
        "state_dir",
        "checkpoints: memory_manager_state (kubelet-compatible), numamem_containers and "
        "numamem_pod_names (container ids, pod names), sys_advisor_state and its journal "
        "(metacache); created 0700",
        DEFAULT_STATE_DIR,
        metavar="DIR",
    ),
    Flag(
        "--sysfs-root",
        "sysfs_root",
        "root that replaces /sys for topology discovery",
        "/sys",
        metavar="DIR",
    ),
    Flag(
        "--cgroup-root",
        "cgroup_root",
        "root of the cgroup hierarchy for container metrics",
        "/sys/fs/cgroup",
        metavar="DIR",
    ),
    Flag(
        "--enforce-cpuset-mems",
        "enforce_cpuset_mems",
        "each collector round, write a pinned container's assigned NUMA nodes to its cgroup's "
        "cpuset.mems when the kernel enforces other nodes (never a node outside the assignment; "
        "v1: sets cpuset.memory_migrate to 1 first, so its pages move too; v2: not while the "
        "parent cgroup lacks an assigned node; backs off when another agent keeps undoing it: "
        'README "Residency"); needs write access to --cgroup-root. For node agents that cannot '
        "apply cpuset.mems through the CRI",
        "false",
        kind="bool",
    ),
    Flag(
        "--proc-root",
        "proc_root",
        "procfs root; iomem there gives memory-drift-tolerance=auto its bound",
        "/proc",
        metavar="DIR",
    ),
    Flag(
        "--memory-manager-policy",
        "memory_manager_policy",
        "memory manager policy (kubelet names, case-sensitive)",
        "None",
        yaml_key="memoryManagerPolicy",
        choices=MEMORY_MANAGER_POLICIES,
    ),
    Flag(
        "--memory-manager-policy-options",
        "memory_manager_policy_options",
        "Static policy options: 'memory-drift-tolerance=fit|off|auto|<quantity>' (KEP-6232; "
        "fit, numamem's default, restarts on a changed machine as long as every stored block "
        "still fits), 'hugepages-availability-verification=true' (KEP-5759)",
        "none",
        yaml_key="memoryManagerPolicyOptions",
        metavar="LIST",
    ),
    Flag(
        "--reserved-memory",
        "reserved_memory",
        "per-NUMA reservations, kubelet syntax '0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi' "
        "(repeatable)",
        "none",
        yaml_key="reservedMemory",
        kind="list",
        metavar="SPEC",
    ),
    Flag(
        "--system-reserved",
        "system_reserved",
        "resources reserved for the system, 'memory=1Gi,...'",
        "none",
        yaml_key="systemReserved",
        metavar="LIST",
    ),
    Flag(
        "--kube-reserved",
        "kube_reserved",
        "resources reserved for Kubernetes, 'memory=1Gi,...'",
        "none",
        yaml_key="kubeReserved",
        metavar="LIST",
    ),
    Flag(
        "--eviction-hard",
        "eviction_hard",
        "hard eviction thresholds, kubelet syntax 'memory.available<100Mi,...' (replaces the "
        "default; 'memory.available<0%' disables that signal, as in the kubelet)",
        DEFAULT_EVICTION_HARD,
        yaml_key="evictionHard",
        metavar="LIST",
    ),
    Flag(
        "--feature-gates",
        "feature_gates",
        "kubelet feature gates, kubelet syntax 'PodLevelResources=true,PodLevelResourceManagers=true' "
        "(both off by default; both on: the memory manager allocates pods that set pod-level "
        "resources, KEP-5526, and writes memory_manager_state as V3, as kubelet 1.37 does); a "
        "gate set here overrides the file's",
        "none",
        yaml_key="featureGates",
        kind="list",
        metavar="LIST",
    ),
    Flag(
        "--topology-manager-policy",
        "topology_manager_policy",
        "topology manager policy",
        "none",
        yaml_key="topologyManagerPolicy",
        choices=TOPOLOGY_MANAGER_POLICIES,
    ),
    Flag(
        "--topology-manager-scope",
        "topology_manager_scope",
        "topology manager scope",
        "container",
        yaml_key="topologyManagerScope",
        choices=TOPOLOGY_MANAGER_SCOPES,
    ),
    Flag(
        "--topology-manager-policy-options",
        "topology_manager_policy_options",
        "'prefer-closest-numa-nodes=true,max-allowable-numa-nodes=16'",
        "none",
        yaml_key="topologyManagerPolicyOptions",
        metavar="LIST",
    ),
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
    Flag(
        "--metacache-discard-corrupt-state",
        "metacache_discard_corrupt_state",
        "on a corrupt sys_advisor_state, move it aside and start empty instead of refusing to start",
        "false",
        kind="bool",
    ),
    Flag(
        "--no-metacache-persist",
        "metacache_persist",
        "keep the metacache in memory only (no sys_advisor_state or journal writes)",
        "persist",
        kind="bool",
    ),
    Flag(
        "--metacache-compact-bytes",
        "metacache_compact_bytes",
        "write a new sys_advisor_state snapshot (and empty its journal) once the journal is "
        "larger than this and than the snapshot",
        "262144",
        kind="int",
        metavar="BYTES",
        allowed=(4096, 1073741824),
        unit="bytes",
    ),
    Flag(
        "--allow-shared-dirs",
        "allow_shared_dirs",
        "run even if the state or socket directory is group/world-writable by another user",
        "false",
        kind="bool",
    ),
    Flag(
        "--max-pods",
        "limits.max_pods",
        "maximum pods in the memory manager state",
        "10000",
        kind="int",
        metavar="N",
        allowed=(1, 1000000),
    ),
    Flag(
        "--max-containers-per-pod",
        "limits.max_containers_per_pod",
        "maximum init+app containers in one pod",
        "256",
        kind="int",
        metavar="N",
        allowed=(1, 10000),
    ),
    Flag(
        "--max-metacache-entries",
        "limits.max_metacache_entries",
        "maximum containers+pools+regions in the metacache",
        "100000",
        kind="int",
        metavar="N",
        allowed=(1, 10000000),
    ),
    Flag(
        "--max-metacache-entry-bytes",
        "limits.max_metacache_entry_bytes",
        "maximum JSON bytes of one metacache entry (a container with its labels and "
        "annotations, a pool, a region); Kubernetes allows 256 KiB of annotations",
        "262144",
        kind="int",
        metavar="BYTES",
        allowed=(1024, 64 * 1024 * 1024),
    ),
    Flag(
        "--max-metacache-bytes",
        "limits.max_metacache_bytes",
        "maximum JSON bytes of all metacache entries together (about what the snapshot "
        "holds; memory is a few times more)",
        "268435456",
        kind="int",
        metavar="BYTES",
        allowed=(64 * 1024, 16 * 1024 * 1024 * 1024),
    ),
    Flag(
        "--max-concurrent-rpcs",
        "limits.max_concurrent_rpcs",
        "numamem RPCs running or queued at once; more are RESOURCE_EXHAUSTED at once (health "
        "and reflection are never refused)",
        "128",
        kind="int",
        metavar="N",
        allowed=(1, 100000),
    ),
    Flag(
        "--max-topology-hints",
        "limits.max_topology_hints",
        "hints per resource GetTopologyHints lists before it counts the rest (at least 255, "
        "every mask of 8 nodes; every preferred hint is listed too, up to 65536); admission "
        "always considers every hint",
        "4096",
        kind="int",
        metavar="N",
        allowed=(255, 65536),
    ),
    Flag(
        "--max-message-bytes",
        "limits.max_message_bytes",
        "maximum gRPC message size",
        str(4 * 1024 * 1024),
        kind="int",
        metavar="N",
        allowed=(65536, 2147483647),
        unit="bytes",
    ),
)
YAML_KEYS = {f.yaml_key: f for f in FLAGS if f.yaml_key}


def add_serve_arguments(
    parser: argparse.ArgumentParser, only: Collection[str] | None = None
) -> None:
    """Add the flags of :data:`FLAGS` (every one, or those named in ``only``) plus
    ``--config``; unset flags parse to ``None``. Commands that read a few settings list only
    those in their ``--help``; ``--config`` may still set any field."""
    parser.add_argument("--config", metavar="FILE", help="YAML file with kubelet-style field names")
    unknown = set(only or ()) - {f.name for f in FLAGS}
    if unknown:
        raise ValueError(f"not numamem serve flags: {sorted(unknown)}")
    for f in FLAGS:
        if only is not None and f.name not in only:
            continue
        meaning = f.help + (f"; one of {', '.join(f.choices)}" if f.choices else "")
        if f.allowed is not None:
            meaning += f"; {allowed_range(f)}"
        yaml_key = f" (YAML: {f.yaml_key})" if f.yaml_key else ""
        # argparse %-formats help texts: a literal % must be doubled.
        help_text = f"{meaning} (default: {f.default}){yaml_key}".replace("%", "%%")
        if f.kind == "bool":
            parser.add_argument(
                f.name, dest=flag_dest(f), action="store_true", default=None, help=help_text
            )
        elif f.kind == "list":
            parser.add_argument(
                f.name, dest=flag_dest(f), action="append", metavar=f.metavar, help=help_text
            )
        else:
            parser.add_argument(
                f.name,
                dest=flag_dest(f),
                metavar=f.metavar or (f.choices and "{" + ",".join(f.choices) + "}") or "VALUE",
                help=help_text,
            )


def flag_dest(f: Flag) -> str:
    return "flag_" + f.attr.replace(".", "__")


def apply_value(cfg: Config, f: Flag, raw: Any, where: str) -> Config:
    """``cfg`` with the flag's setting converted from ``raw`` (a flag string or a YAML value)."""
    if f.attr == "feature_gates":
        settings, _ = parse_feature_gates(raw, where)
        return replace(cfg, feature_gates=merge_feature_gates(cfg.feature_gates, settings))
    value = _convert(f, raw, where)
    if f.attr.startswith("limits."):
        return replace(cfg, limits=replace(cfg.limits, **{f.attr.split(".", 1)[1]: value}))
    return replace(cfg, **{f.attr: value})


def _convert(f: Flag, raw: Any, where: str) -> Any:
    if f.kind == "bool":
        # Presence of the flag means "on"; --no-... flags store the negation.
        return not f.name.startswith("--no-")
    if f.attr == "reserved_memory":
        return parse_reserved_memory(raw, where)
    if f.attr in ("system_reserved", "kube_reserved"):
        return parse_reserved_resources(raw, where)
    if f.attr == "eviction_hard":
        return parse_eviction_hard(raw, where)
    if f.attr in ("topology_manager_policy_options", "memory_manager_policy_options"):
        return parse_key_values(raw, where)
    if f.kind in ("int", "float"):
        return _number_in_range(f, raw, where)
    if f.kind == "address":
        return _ip_address(raw, where)
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: expected a string, got {quote(raw)}")
    if f.choices is not None and raw not in f.choices:
        raise ConfigError(f"{where}: {_choice_error(f, raw)}")
    if f.attr in (
        "socket",
        "state_dir",
        "sysfs_root",
        "cgroup_root",
        "metrics_socket",
        "podresources_socket",
        "kubelet_podresources_socket",
    ):
        if not raw:
            raise ConfigError(f"{where}: must not be empty")
        return os.path.abspath(raw)
    return raw


def _choice_error(f: Flag, raw: str) -> str:
    options = ", ".join(f'"{c}"' for c in f.choices or ())
    if f.attr == "memory_manager_policy":
        if raw == "BestEffort":  # the kubelet's Windows-only policy, refused with its Linux text
            return (
                f'policy "{raw}" is not available for platform "linux" (expected one of {options})'
            )
        return f'unknown policy: "{raw}" (expected one of {options})'
    if f.attr == "topology_manager_policy":
        return f'unknown policy: "{raw}" (expected one of {options})'
    if f.attr == "topology_manager_scope":
        return f'unknown scope: "{raw}" (expected one of {options})'
    return f"{quote(raw)} is not one of {options}"


def _ip_address(raw: Any, where: str) -> str:
    """An IPv4 or IPv6 literal (brackets allowed: ``[::1]``), returned without brackets."""
    text = raw.strip() if isinstance(raw, str) else ""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ConfigError(
            f"{where}: {quote(raw)} is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1, ::)"
        ) from None


def allowed_range(f: Flag) -> str:
    """``from LOW to HIGH [unit]`` of a numeric flag ("" for the others)."""
    if f.allowed is None:
        return ""
    low, high = (str(int(x)) if float(x).is_integer() else f"{x:g}" for x in f.allowed)
    return f"from {low} to {high}" + (f" {f.unit}" if f.unit else "")


def _number_in_range(f: Flag, raw: Any, where: str) -> int | float:
    """``raw`` as the flag's number, within :attr:`Flag.allowed`; the error names the range."""
    low, high = f.allowed or (0, float("inf"))
    if f.kind == "int":
        allowed = f"an integer {allowed_range(f)}"
        try:
            ok = isinstance(raw, (int, str)) and not isinstance(raw, bool)
            value: int | float = int(raw) if ok else float("nan")
        except ValueError:
            value = float("nan")
    else:
        allowed = f"a number {allowed_range(f)}"
        try:
            value = float(raw) if not isinstance(raw, bool) else float("nan")
        except (TypeError, ValueError):
            value = float("nan")
    if not low <= value <= high:  # NaN fails too
        raise ConfigError(f"{where}: got {quote(raw)}; allowed: {allowed}")
    return value


def describe(cfg: Config) -> dict[str, Any]:
    """A JSON-friendly summary of the configuration for the start-up log line."""
    return {
        "socket": cfg.socket,
        "state_dir": cfg.state_dir,
        "sysfs_root": cfg.sysfs_root,
        "memory_manager_policy": cfg.memory_manager_policy,
        "reserved_memory": [
            {"numa_node": r.numa_node, "limits": {k: str(q) for k, q in r.limits}}
            for r in cfg.reserved_memory
        ],
        "system_reserved": {k: str(q) for k, q in cfg.system_reserved},
        "kube_reserved": {k: str(q) for k, q in cfg.kube_reserved},
        "eviction_hard": {
            t.signal: str(t.quantity)
            if t.quantity is not None
            else f"{float(t.percentage or 0):.2%}"
            for t in cfg.eviction_hard
        },
        "topology_manager_policy": cfg.topology_manager_policy,
        "topology_manager_scope": cfg.topology_manager_scope,
        "topology_manager_policy_options": dict(cfg.topology_manager_policy_options),
        "feature_gates": list(cfg.feature_gates.enabled()),
        "health": None if cfg.health_port is None else f"{cfg.health_address}:{cfg.health_port}",
        "metrics": None
        if cfg.metrics_port is None
        else f"{cfg.metrics_address}:{cfg.metrics_port}",
        "max_concurrent_rpcs": cfg.limits.max_concurrent_rpcs,
        "enforce_cpuset_mems": cfg.enforce_cpuset_mems,
    }


def flag_reference() -> Sequence[tuple[str, str, str]]:
    """(flag, default, meaning) rows for the README configuration reference."""
    rows = [
        ("--config FILE", "none", "YAML file with kubelet-style field names; flags override it")
    ]
    for f in FLAGS:
        name = f.name + (f" {f.metavar}" if f.metavar and f.kind != "bool" else "")
        meaning = f.help + (f" (YAML: `{f.yaml_key}`)" if f.yaml_key else "")
        if f.choices:
            meaning += "; one of " + ", ".join(f"`{c}`" for c in f.choices)
        if f.allowed is not None:
            meaning += f"; {allowed_range(f)}"
        rows.append((name, f.default, meaning))
    return rows
