"""kubelet syntax of the reservation and eviction settings, as flags and as YAML values.

Every parser takes ``where`` (how the operator wrote the setting: ``--flag``
or ``field (in FILE)``) and raises :class:`~numamem.errors.ConfigError` with one
line naming it and the bad value.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from numamem.config.model import (
    EVICTION_SIGNALS,
    FEATURE_GATES,
    POD_LEVEL_RESOURCE_MANAGERS,
    POD_LEVEL_RESOURCES,
    RESERVABLE_RESOURCES,
    EvictionThreshold,
    FeatureGates,
    ReservedMemory,
)
from numamem.errors import ConfigError, QuantityError, quote
from numamem.quantity import Quantity, parse_quantity


def _quantity(text: Any, where: str) -> Quantity:
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ConfigError(f'{where}: expected a quantity such as "1Gi", got {quote(text)}')
    try:
        return parse_quantity(str(text))
    except QuantityError as err:
        raise ConfigError(f"{where}: {quote(text)} is not a valid quantity: {err}") from err


def _split_list(raw: Any, where: str) -> list[tuple[str, Any]]:
    """``a=b,c=d`` (flag) or a mapping (YAML) into ordered pairs; repeated flags concatenate."""
    if isinstance(raw, Mapping):
        return [(str(k), v) for k, v in raw.items()]
    items = raw if isinstance(raw, list) else [raw]
    pairs: list[tuple[str, Any]] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: expected 'key=value,...', got {quote(item)}")
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise ConfigError(f"{where}: expected key=value, got {quote(part)}")
            pairs.append((key.strip(), value.strip()))
    return pairs


def parse_key_values(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``k=v,k2=v2`` or a mapping; duplicate keys are errors."""
    pairs = _split_list(raw, where)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ConfigError(f"{where}: duplicate key {quote(key)}")
        seen.add(key)
    return tuple((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in pairs)


def parse_reserved_resources(raw: Any, where: str) -> tuple[tuple[str, Quantity], ...]:
    """kubelet ``--system-reserved``/``--kube-reserved``: cpu, memory, ephemeral-storage, pid."""
    result: dict[str, Quantity] = {}
    for name, text in _split_list(raw, where):
        if name not in RESERVABLE_RESOURCES:
            allowed = ", ".join(RESERVABLE_RESOURCES)
            raise ConfigError(
                f"{where}: cannot reserve {quote(name)} resource (allowed: {allowed})"
            )
        q = _quantity(text, f"{where} {name}")
        if q.value < 0:
            raise ConfigError(
                f"{where}: resource quantity for {quote(name)} cannot be negative: {q}"
            )
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
                raise ConfigError(f"{where}: expected 'signal<value,...', got {quote(item)}")
            for part in filter(None, (p.strip() for p in item.split(","))):
                signal, sep, value = part.partition("<")
                if not sep:
                    raise ConfigError(f"{where}: expected signal<value, got {quote(part)}")
                pairs.append((signal.strip(), value.strip()))
    thresholds: dict[str, EvictionThreshold] = {}
    seen: set[str] = set()
    for signal, value in pairs:
        if signal not in EVICTION_SIGNALS:
            raise ConfigError(f"{where}: unsupported eviction signal {quote(signal)}")
        if signal in seen:
            raise ConfigError(f"{where}: duplicate eviction signal {quote(signal)}")
        seen.add(signal)
        if value.endswith("%"):
            if value in ("0%", "100%"):
                continue
            try:
                pct = Fraction(value[:-1])
            except (ValueError, ZeroDivisionError) as err:
                raise ConfigError(f"{where}: {signal}: invalid percentage {quote(value)}") from err
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
                raise ConfigError(
                    f"{here}.numaNode: expected a NUMA node id >= 0, got {quote(node)}"
                )
            limits = item.get("limits")
            if not isinstance(limits, Mapping):
                raise ConfigError(
                    f"{here}.limits: expected a mapping of type: quantity, got {quote(limits)}"
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
            raise ConfigError(f"{where}: expected 'node:type=quantity,...;...', got {quote(spec)}")
        for reservation in filter(None, (r.strip() for r in spec.split(";"))):
            node_text, sep, limits_text = reservation.partition(":")
            if not sep:
                raise ConfigError(
                    f"{where}: expected numaNodeID:type=quantity[,type=quantity...], got {quote(reservation)}"
                )
            if not node_text.strip().isdigit():
                raise ConfigError(
                    f"{where}: NUMA node id must be an integer, got {quote(node_text)}"
                )
            limits_pairs: list[tuple[str, Quantity]] = []
            for part in limits_text.split(","):
                name, eq, qty = part.partition("=")
                if not eq or not name.strip():
                    raise ConfigError(f"{where}: expected type=quantity, got {quote(part)}")
                limits_pairs.append(
                    (name.strip(), _quantity(qty.strip(), f"{where} {name.strip()}"))
                )
            entries.append(ReservedMemory(int(node_text), tuple(limits_pairs)))
    return tuple(entries)


_GO_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}
"""What Go's ``strconv.ParseBool`` accepts (the kubelet's ``--feature-gates`` values)."""


def parse_feature_gates(
    raw: Any, where: str, *, strict: bool = True
) -> tuple[dict[str, bool], list[str]]:
    """kubelet ``--feature-gates`` (``Name=bool,...``, repeatable) or the YAML ``featureGates``
    mapping (booleans): the gates numamem knows (:data:`FEATURE_GATES`) and the names of the
    others. An unknown name is an error naming the known ones, unless not ``strict`` (the
    ``featureGates`` of a KubeletConfiguration, which holds every gate of the kubelet's);
    later settings of a gate win."""
    if isinstance(raw, Mapping):
        pairs: list[tuple[str, Any]] = [(str(k), v) for k, v in raw.items()]
        for name, value in pairs:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {name}: expected true or false, got {quote(value)}")
    else:
        pairs = []
        for item in raw if isinstance(raw, list) else [raw]:
            if not isinstance(item, str):
                raise ConfigError(f"{where}: expected 'Name=true,...', got {quote(item)}")
            for part in filter(None, (p.strip() for p in item.split(","))):
                name, sep, text = part.partition("=")
                if not sep or not name.strip():
                    raise ConfigError(f"{where}: malformed pair {quote(part)}, expect string=bool")
                value = _GO_BOOLS.get(text.strip())
                if value is None:
                    raise ConfigError(
                        f"{where}: invalid value of {name.strip()}={text.strip()}: expected "
                        "true or false"
                    )
                pairs.append((name.strip(), value))
    known: dict[str, bool] = {}
    others: list[str] = []
    for name, value in pairs:
        if name in FEATURE_GATES:
            known[name] = bool(value)
        elif strict:
            raise ConfigError(
                f"{where}: unrecognized feature gate: {name} (numamem knows "
                f"{', '.join(FEATURE_GATES)})"
            )
        else:
            others.append(name)
    return known, others


def merge_feature_gates(gates: FeatureGates, settings: Mapping[str, bool]) -> FeatureGates:
    """``gates`` with ``settings`` (gate name -> value) applied."""
    return FeatureGates(
        settings.get(POD_LEVEL_RESOURCES, gates.pod_level_resources),
        settings.get(POD_LEVEL_RESOURCE_MANAGERS, gates.pod_level_resource_managers),
    )


def check_feature_gates(gates: FeatureGates) -> None:
    """The gates' dependency: the pod-level resource managers act on pod-level resources."""
    if gates.pod_level_resource_managers and not gates.pod_level_resources:
        raise ConfigError(
            f"--feature-gates: {POD_LEVEL_RESOURCE_MANAGERS}=true needs {POD_LEVEL_RESOURCES}=true "
            "(the pod-level resource managers allocate by pod-level resources, KEP-5526)"
        )
