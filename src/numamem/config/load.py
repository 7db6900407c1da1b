"""The merged configuration: defaults, then ``--config FILE``, then command-line flags."""

from __future__ import annotations

import argparse

from numamem.config.flags import FLAGS, apply_value, flag_dest
from numamem.config.model import Config
from numamem.config.syntax import check_feature_gates
from numamem.config.yamlfile import apply_yaml


def check_flags(args: argparse.Namespace) -> None:
    """Each command-line flag's value on its own (syntax, allowed values and ranges), before
    the ``--config`` file is read: a ConfigError here is a usage error (``numamem serve``
    exits 2); what :func:`config_from_args` refuses after it is the configuration's (the
    file, or a rule across values: exit 1)."""
    cfg = Config()
    for f in FLAGS:
        raw = getattr(args, flag_dest(f), None)
        if raw is not None:
            apply_value(cfg, f, raw, f.name)


def config_from_args(args: argparse.Namespace) -> Config:
    """Merge defaults, the ``--config`` file and the flags into a :class:`Config`."""
    cfg = Config()
    if args.config:
        cfg = apply_yaml(cfg, args.config)
    for f in FLAGS:
        raw = getattr(args, flag_dest(f), None)
        if raw is None:
            continue
        cfg = apply_value(cfg, f, raw, f.name)
    check_feature_gates(cfg.feature_gates)
    return cfg
