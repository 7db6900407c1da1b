"""What a ``numamem serve`` flag is (:class:`Flag`), and how a value becomes its setting.

:func:`apply_value` converts a flag's string, or a ``--config`` YAML value, by the flag's
kind, choices and allowed range (or by the kubelet syntax of :mod:`numamem.config.syntax`)
and returns the configuration with it set. Every problem is a
:class:`~numamem.errors.ConfigError` with one line naming the field (as the operator wrote
it: ``--flag`` or ``fileField (in FILE)``) and the bad value. Only syntax is checked here;
rules that need the machine (reservations versus NUMA nodes, topology-manager limits) are
checked when the memory manager and topology manager are built. Pure functions.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, replace
from typing import Any

from numamem.config.model import Config
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
