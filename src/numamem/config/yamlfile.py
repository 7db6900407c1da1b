"""The ``--config FILE`` YAML document: kubelet field names, applied over the defaults."""

from __future__ import annotations

from pathlib import Path

import yaml

from numamem.config.flags import YAML_KEYS, apply_value
from numamem.config.model import Config
from numamem.errors import ConfigError


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
        cfg = apply_value(cfg, f, value, f"{key} (in {path})")
    return cfg
