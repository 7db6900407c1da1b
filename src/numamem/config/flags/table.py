"""The ``numamem serve`` flags: one table for the argument parser, the YAML keys, docs/configuration.md
and the start-up log line.

:data:`FLAGS` is every flag in the order ``--help`` and docs/configuration.md's reference
(``make docs``, :func:`flag_reference`) list them: where numamem works on the host
(:mod:`.host`), the kubelet's settings (:mod:`.kubelet`), how it serves (:mod:`.serving`),
what it keeps and accepts (:mod:`.limits`). What a flag is and how a value is converted:
:mod:`.spec`.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Sequence
from typing import Any

from numamem.config.flags.host import HOST
from numamem.config.flags.kubelet import KUBELET
from numamem.config.flags.limits import LIMITS
from numamem.config.flags.serving import SERVING
from numamem.config.flags.spec import Flag, allowed_range
from numamem.config.model import Config

FLAGS: tuple[Flag, ...] = (*HOST, *KUBELET, *SERVING, *LIMITS)
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
    """(flag, default, meaning) rows for docs/configuration.md's flag reference."""
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
