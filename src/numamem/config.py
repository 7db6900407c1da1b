"""Daemon configuration: flag definitions, the YAML file, and their merge.

Sources, lowest precedence first: built-in defaults, ``--config FILE`` (YAML
with kubelet-style field names), command-line flags. Every problem is a
:class:`~numamem.errors.ConfigError` with one line naming the field (as the
operator wrote it: ``--flag`` or ``fileField (in FILE)``) and the bad value.

This module only parses and checks syntax. Rules that need the machine
(reservations versus NUMA nodes, topology-manager limits) are checked by the
memory manager and topology manager when the daemon builds them.

The flag table :data:`FLAGS` is the single definition used by the argument
parser and by the generated configuration reference in the README.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from numamem.errors import ConfigError, QuantityError
from numamem.quantity import Quantity, parse_quantity

MEMORY_MANAGER_POLICIES = ("None", "Static")
TOPOLOGY_MANAGER_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_MANAGER_SCOPES = ("container", "pod")
RESERVABLE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
EVICTION_SIGNALS = (
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
)
DEFAULT_SOCKET = "/run/numamem/numamem.sock"
DEFAULT_STATE_DIR = "/var/lib/numamem"
DEFAULT_EVICTION_HARD = "memory.available<100Mi"


@dataclass(frozen=True, slots=True)
class ReservedMemory:
    """One ``reservedMemory`` entry: limits reserved on one NUMA node, in input order."""

    numa_node: int
    limits: tuple[tuple[str, Quantity], ...]


@dataclass(frozen=True, slots=True)
class EvictionThreshold:
    """A hard eviction threshold ``signal<value``; exactly one of quantity/percentage is set."""

    signal: str
    quantity: Quantity | None = None
    percentage: Fraction | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep one client from exhausting the daemon (RESOURCE_EXHAUSTED past them)."""

    max_pods: int = 10000
    max_containers_per_pod: int = 256
    max_metacache_entries: int = 100000
    max_message_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Config:
    """The merged configuration. Immutable; build a changed copy with :func:`dataclasses.replace`."""

    socket: str = DEFAULT_SOCKET
    state_dir: str = DEFAULT_STATE_DIR
    sysfs_root: str = "/sys"
    cgroup_root: str = "/sys/fs/cgroup"
    memory_manager_policy: str = "None"
    reserved_memory: tuple[ReservedMemory, ...] = ()
    system_reserved: tuple[tuple[str, Quantity], ...] = ()
    kube_reserved: tuple[tuple[str, Quantity], ...] = ()
    eviction_hard: tuple[EvictionThreshold, ...] = field(
        default_factory=lambda: parse_eviction_hard(DEFAULT_EVICTION_HARD, "default")
    )
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    topology_manager_policy_options: tuple[tuple[str, str], ...] = ()
    health_port: int | None = None
    metrics_port: int | None = None
    metrics_socket: str | None = None
    log_level: str = "info"
    log_format: str = "json"
    shutdown_grace_seconds: float = 5.0
    workers: int = 16
    metric_interval_seconds: float = 10.0
    metric_insurance_period_seconds: float = 0.0
    metacache_discard_corrupt_state: bool = False
    metacache_persist: bool = True
    allow_shared_dirs: bool = False
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True)
class Flag:
    """One ``numamem serve`` flag: its name, the Config attribute, a YAML key if kubelet has one."""

    name: str
    attr: str
    help: str
    default: str
    yaml_key: str | None = None
    kind: str = "str"  # str | int | float | bool | list
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


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
        "checkpoints: memory_manager_state (kubelet-compatible), sys_advisor_state (metacache); "
        "created 0700",
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
        "--memory-manager-policy",
        "memory_manager_policy",
        "memory manager policy (kubelet names, case-sensitive)",
        "None",
        yaml_key="memoryManagerPolicy",
        choices=MEMORY_MANAGER_POLICIES,
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
    ),
    Flag(
        "--metrics-port",
        "metrics_port",
        "TCP port for Prometheus metrics (/metrics)",
        "off",
        kind="int",
        metavar="N",
    ),
    Flag(
        "--metrics-socket",
        "metrics_socket",
        "unix socket for Prometheus metrics over HTTP",
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
    ),
    Flag("--workers", "workers", "gRPC handler threads", "16", kind="int", metavar="N"),
    Flag(
        "--metric-interval",
        "metric_interval_seconds",
        "seconds between container metric samples",
        "10",
        kind="float",
        metavar="SECONDS",
    ),
    Flag(
        "--metric-insurance-period",
        "metric_insurance_period_seconds",
        "metrics older than this are an error (0 = never expire; values below 60 are raised to 60)",
        "0",
        kind="float",
        metavar="SECONDS",
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
        "keep the metacache in memory only (no sys_advisor_state writes)",
        "persist",
        kind="bool",
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
    ),
    Flag(
        "--max-containers-per-pod",
        "limits.max_containers_per_pod",
        "maximum init+app containers in one pod",
        "256",
        kind="int",
        metavar="N",
    ),
    Flag(
        "--max-metacache-entries",
        "limits.max_metacache_entries",
        "maximum containers+pools+regions in the metacache",
        "100000",
        kind="int",
        metavar="N",
    ),
    Flag(
        "--max-message-bytes",
        "limits.max_message_bytes",
        "maximum gRPC message size",
        str(4 * 1024 * 1024),
        kind="int",
        metavar="N",
    ),
)
YAML_KEYS = {f.yaml_key: f for f in FLAGS if f.yaml_key}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every flag of :data:`FLAGS` (plus ``--config``); unset flags parse to ``None``."""
    parser.add_argument("--config", metavar="FILE", help="YAML file with kubelet-style field names")
    for f in FLAGS:
        help_text = f"{f.help} (default: {f.default})"
        if f.kind == "bool":
            parser.add_argument(
                f.name, dest=_dest(f), action="store_true", default=None, help=help_text
            )
        elif f.kind == "list":
            parser.add_argument(
                f.name, dest=_dest(f), action="append", metavar=f.metavar, help=help_text
            )
        else:
            parser.add_argument(
                f.name, dest=_dest(f), metavar=f.metavar or f.name[2:].upper(), help=help_text
            )


def _dest(f: Flag) -> str:
    return "flag_" + f.attr.replace(".", "__")


def config_from_args(args: argparse.Namespace) -> Config:
    """Merge defaults, the ``--config`` file and the flags into a :class:`Config`."""
    cfg = Config()
    if args.config:
        cfg = apply_yaml(cfg, args.config)
    for f in FLAGS:
        raw = getattr(args, _dest(f), None)
        if raw is None:
            continue
        cfg = _apply(cfg, f, raw, f.name)
    return cfg


def apply_yaml(cfg: Config, path: str) -> Config:
    """Apply the kubelet-style fields of a YAML file; unknown fields are errors."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"--config {path!r}: cannot read: {err.strerror}") from err
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise ConfigError(f"--config {path!r}: not valid YAML{where}") from err
    if doc is None:
        return cfg
    if not isinstance(doc, dict):
        raise ConfigError(
            f"--config {path!r}: expected a mapping of fields, got {type(doc).__name__}"
        )
    for key, value in doc.items():
        f = YAML_KEYS.get(str(key))
        if f is None:
            known = ", ".join(sorted(YAML_KEYS))
            raise ConfigError(f"{key} (in {path}): unknown field; known fields: {known}")
        cfg = _apply(cfg, f, value, f"{key} (in {path})")
    return cfg


def _apply(cfg: Config, f: Flag, raw: Any, where: str) -> Config:
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
    if f.attr == "topology_manager_policy_options":
        return parse_key_values(raw, where)
    if f.kind == "int":
        return _positive_int(raw, where, port=f.attr.endswith("_port"))
    if f.kind == "float":
        return _non_negative_float(raw, where)
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: expected a string, got {raw!r}")
    if f.choices is not None and raw not in f.choices:
        raise ConfigError(f"{where}: {_choice_error(f, raw)}")
    if f.attr in ("socket", "state_dir", "sysfs_root", "cgroup_root", "metrics_socket"):
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
    return f"{raw!r} is not one of {options}"


def _positive_int(raw: Any, where: str, *, port: bool) -> int:
    try:
        value = int(raw) if isinstance(raw, (int, str)) and not isinstance(raw, bool) else None
    except ValueError:
        value = None
    if value is None or value <= 0:
        raise ConfigError(f"{where}: expected a positive integer, got {raw!r}")
    if port and value > 65535:
        raise ConfigError(f"{where}: port {value} is out of range 1-65535")
    return value


def _non_negative_float(raw: Any, where: str) -> float:
    try:
        value = float(raw) if not isinstance(raw, bool) else -1.0
    except (TypeError, ValueError):
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{where}: expected a non-negative number of seconds, got {raw!r}")
    return value


def _quantity(text: Any, where: str) -> Quantity:
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ConfigError(f'{where}: expected a quantity such as "1Gi", got {text!r}')
    try:
        return parse_quantity(str(text))
    except QuantityError as err:
        raise ConfigError(f"{where}: {text!r} is not a valid quantity: {err}") from err


def _split_list(raw: Any, where: str) -> list[tuple[str, Any]]:
    """``a=b,c=d`` (flag) or a mapping (YAML) into ordered pairs; repeated flags concatenate."""
    if isinstance(raw, Mapping):
        return [(str(k), v) for k, v in raw.items()]
    items = raw if isinstance(raw, list) else [raw]
    pairs: list[tuple[str, Any]] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: expected 'key=value,...', got {item!r}")
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise ConfigError(f"{where}: expected key=value, got {part!r}")
            pairs.append((key.strip(), value.strip()))
    return pairs


def parse_key_values(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``k=v,k2=v2`` or a mapping; duplicate keys are errors."""
    pairs = _split_list(raw, where)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ConfigError(f"{where}: duplicate key {key!r}")
        seen.add(key)
    return tuple((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in pairs)


def parse_reserved_resources(raw: Any, where: str) -> tuple[tuple[str, Quantity], ...]:
    """kubelet ``--system-reserved``/``--kube-reserved``: cpu, memory, ephemeral-storage, pid."""
    result: dict[str, Quantity] = {}
    for name, text in _split_list(raw, where):
        if name not in RESERVABLE_RESOURCES:
            allowed = ", ".join(RESERVABLE_RESOURCES)
            raise ConfigError(f"{where}: cannot reserve {name!r} resource (allowed: {allowed})")
        q = _quantity(text, f"{where} {name}")
        if q.value < 0:
            raise ConfigError(f"{where}: resource quantity for {name!r} cannot be negative: {q}")
        result[name] = q
    return tuple(result.items())


def parse_eviction_hard(raw: Any, where: str) -> tuple[EvictionThreshold, ...]:
    """kubelet ``--eviction-hard``: ``signal<quantity`` or ``signal<N%``; YAML: a mapping.

    As kubelet's threshold parser: exactly ``0%`` or ``100%`` is no threshold
    (the way to disable a signal, e.g. the default ``memory.available<100Mi``);
    other percentages must lie in [0%, 100%]; a quantity must be positive.
    """
    if isinstance(raw, Mapping):
        pairs = [(str(k), str(v)) for k, v in raw.items()]
    else:
        pairs = []
        for item in raw if isinstance(raw, list) else [raw]:
            if not isinstance(item, str):
                raise ConfigError(f"{where}: expected 'signal<value,...', got {item!r}")
            for part in filter(None, (p.strip() for p in item.split(","))):
                signal, sep, value = part.partition("<")
                if not sep:
                    raise ConfigError(f"{where}: expected signal<value, got {part!r}")
                pairs.append((signal.strip(), value.strip()))
    thresholds: dict[str, EvictionThreshold] = {}
    seen: set[str] = set()
    for signal, value in pairs:
        if signal not in EVICTION_SIGNALS:
            raise ConfigError(f"{where}: unsupported eviction signal {signal!r}")
        if signal in seen:
            raise ConfigError(f"{where}: duplicate eviction signal {signal!r}")
        seen.add(signal)
        if value.endswith("%"):
            if value in ("0%", "100%"):
                continue
            try:
                pct = Fraction(value[:-1])
            except (ValueError, ZeroDivisionError) as err:
                raise ConfigError(f"{where}: {signal}: invalid percentage {value!r}") from err
            if pct < 0:
                raise ConfigError(
                    f"{where}: eviction percentage threshold {signal} must be >= 0%: {value}"
                )
            if pct > 100:
                raise ConfigError(
                    f"{where}: eviction percentage threshold {signal} must be <= 100%: {value}"
                )
            thresholds[signal] = EvictionThreshold(signal, percentage=pct / 100)
        else:
            q = _quantity(value, f"{where} {signal}")
            if q.value <= 0:
                raise ConfigError(
                    f"{where}: eviction threshold {signal} must be positive: {q} (use {signal}<0% "
                    "to disable it)"
                )
            thresholds[signal] = EvictionThreshold(signal, quantity=q)
    return tuple(thresholds.values())


def parse_reserved_memory(raw: Any, where: str) -> tuple[ReservedMemory, ...]:
    """kubelet ``--reserved-memory`` syntax (repeatable) or the YAML ``reservedMemory`` list.

    Entries keep their order; the memory manager validates them against the
    machine and node allocatable (zero or duplicate entries, unknown NUMA nodes,
    unsupported types) with the kubelet's texts.
    """
    entries: list[ReservedMemory] = []
    if isinstance(raw, list) and all(isinstance(i, Mapping) for i in raw) and raw:
        for index, item in enumerate(raw):
            here = f"{where}[{index}]"
            unknown = set(item) - {"numaNode", "limits"}
            if unknown:
                raise ConfigError(f"{here}: unknown field(s) {sorted(unknown)}")
            node = item.get("numaNode")
            if isinstance(node, bool) or not isinstance(node, int) or node < 0:
                raise ConfigError(f"{here}.numaNode: expected a NUMA node id >= 0, got {node!r}")
            limits = item.get("limits")
            if not isinstance(limits, Mapping):
                raise ConfigError(
                    f"{here}.limits: expected a mapping of type: quantity, got {limits!r}"
                )
            entries.append(
                ReservedMemory(
                    node,
                    tuple((str(k), _quantity(v, f"{here}.limits.{k}")) for k, v in limits.items()),
                )
            )
        return tuple(entries)
    for spec in raw if isinstance(raw, list) else [raw]:
        if not isinstance(spec, str):
            raise ConfigError(f"{where}: expected 'node:type=quantity,...;...', got {spec!r}")
        for reservation in filter(None, (r.strip() for r in spec.split(";"))):
            node_text, sep, limits_text = reservation.partition(":")
            if not sep:
                raise ConfigError(
                    f"{where}: expected numaNodeID:type=quantity[,type=quantity...], got {reservation!r}"
                )
            if not node_text.strip().isdigit():
                raise ConfigError(f"{where}: NUMA node id must be an integer, got {node_text!r}")
            limits_pairs: list[tuple[str, Quantity]] = []
            for part in limits_text.split(","):
                name, eq, qty = part.partition("=")
                if not eq or not name.strip():
                    raise ConfigError(f"{where}: expected type=quantity, got {part!r}")
                limits_pairs.append(
                    (name.strip(), _quantity(qty.strip(), f"{where} {name.strip()}"))
                )
            entries.append(ReservedMemory(int(node_text), tuple(limits_pairs)))
    return tuple(entries)


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
        "health_port": cfg.health_port,
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
        rows.append((name, f.default, meaning))
    return rows
