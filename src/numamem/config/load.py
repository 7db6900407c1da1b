"""The merged configuration: defaults, then ``--config FILE``, then command-line flags."""

from __future__ import annotations

import argparse

from numamem.config.checks import ValueChecks, check_value
from numamem.config.flags.spec import apply_value
from numamem.config.flags.table import FLAGS, flag_dest
from numamem.config.model import Config
from numamem.config.syntax import check_feature_gates
from numamem.config.yamlfile import apply_yaml


def check_flags(args: argparse.Namespace, checks: ValueChecks | None = None) -> None:
    """Each command-line flag's value on its own (syntax, allowed values and ranges, and
    ``checks``: the policy options' values), before the ``--config`` file is read: a
    ConfigError here names the flag and is a usage error (``numamem serve`` exits 2); what
    :func:`config_from_args` refuses after it is the configuration's (the file, or a rule
    across values: exit 1)."""
    cfg = Config()
    for f in FLAGS:
        raw = getattr(args, flag_dest(f), None)
        if raw is not None:
            cfg = apply_value(cfg, f, raw, f.name)
            check_value(checks or {}, f.attr, getattr(cfg, f.attr, None), f.name)


def config_from_args(args: argparse.Namespace, checks: ValueChecks | None = None) -> Config:
    """Merge defaults, the ``--config`` file and the flags into a :class:`Config`; ``checks``
    also run on the file's values (a refusal names the field and its line)."""
    cfg = Config()
    if args.config:
        cfg = apply_yaml(cfg, args.config, checks or {})
    for f in FLAGS:
        raw = getattr(args, flag_dest(f), None)
        if raw is None:
            continue
        cfg = apply_value(cfg, f, raw, f.name)
    check_feature_gates(cfg.feature_gates)
    return cfg
