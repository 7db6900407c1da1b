"""The ``--config FILE`` YAML document: kubelet field names, applied over the defaults.

The document is either numamem's own (only the fields numamem reads) or the
kubelet's ``KubeletConfiguration`` as it is (``kind``/``apiVersion`` set): then
the kubelet's other fields are ignored, and only a field in neither schema is
an error. It is read within :mod:`numamem.config.yamlbounds`' bounds (size, depth,
values with aliases expanded).
"""

from __future__ import annotations

from dataclasses import replace

import yaml

from numamem.config.checks import ValueChecks, check_value
from numamem.config.flags.spec import apply_value
from numamem.config.flags.table import YAML_KEYS
from numamem.config.kubelet_fields import API_GROUP, KIND, KUBELET_FIELDS
from numamem.config.model import Config
from numamem.config.syntax import merge_feature_gates, parse_feature_gates
from numamem.config.yamlbounds import compose_bounded, construct, read_bounded
from numamem.errors import PATH_QUOTE_BYTES, ConfigError, quote


def apply_yaml(cfg: Config, path: str, checks: ValueChecks | None = None) -> Config:
    """Apply the kubelet-style fields of a YAML file; unknown fields and values ``checks``
    refuse are errors, each naming the field, the file and its line. Logs nothing (it runs
    before logging is configured): the kubelet fields numamem ignores are in
    ``Config.ignored_kubelet_fields``."""
    named = f"--config {quote(path, limit=PATH_QUOTE_BYTES)}"
    try:
        text = read_bounded(path, named)
    except OSError as err:
        raise ConfigError(f"{named}: cannot read: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{named}: not UTF-8 text (byte {err.start})") from err
    try:
        node = compose_bounded(text, named)
        doc = construct(node)
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        problem = getattr(err, "problem", None)
        why = f": {quote(problem, style='bare')}" if problem else ""
        raise ConfigError(f"{named}: not valid YAML{where}{why}") from err
    if doc is None:
        return cfg
    if not isinstance(doc, dict):
        raise ConfigError(
            f"--config {quote(path, limit=PATH_QUOTE_BYTES)}: expected a mapping of fields, got {type(doc).__name__}"
        )
    kubelet = _is_kubelet_configuration(doc, path)
    lines = _key_lines(node)
    ignored = []
    for key, value in doc.items():
        where = f"{key} (in {path}" + (f", line {lines[key]})" if key in lines else ")")
        f = YAML_KEYS.get(str(key))
        if f is None:
            if kubelet and str(key) in KUBELET_FIELDS:
                ignored.append(str(key))
                continue
            known = ", ".join(sorted(YAML_KEYS))
            also = " (and the other fields of a KubeletConfiguration)" if kubelet else ""
            raise ConfigError(f"{where}: unknown field; known fields: {known}{also}")
        if f.attr == "feature_gates":
            # A KubeletConfiguration names every kubelet gate: numamem reads its own two.
            settings, others = parse_feature_gates(value, where, strict=not kubelet)
            ignored += [f"featureGates.{name}" for name in others]
            cfg = replace(cfg, feature_gates=merge_feature_gates(cfg.feature_gates, settings))
            continue
        cfg = apply_value(cfg, f, value, where)
        check_value(checks or {}, f.attr, getattr(cfg, f.attr, None), where)
    return replace(cfg, ignored_kubelet_fields=tuple(ignored)) if ignored else cfg


def _key_lines(node: yaml.Node | None) -> dict[object, int]:
    """Top-level key -> its 1-based line, for the messages."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    loader = yaml.SafeLoader("")
    out: dict[object, int] = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            out.setdefault(loader.construct_object(key_node), key_node.start_mark.line + 1)
    return out


def _is_kubelet_configuration(doc: dict[object, object], path: str) -> bool:
    """A ``kind: KubeletConfiguration`` document (the kubelet's own config file)."""
    if "kind" not in doc and "apiVersion" not in doc:
        return False
    kind, version = doc.get("kind"), doc.get("apiVersion")
    if kind != KIND or not isinstance(version, str) or not version.startswith(API_GROUP + "/"):
        raise ConfigError(
            f"--config {quote(path, limit=PATH_QUOTE_BYTES)}: kind {quote(kind)}, apiVersion {quote(version)}: numamem reads its own "
            f"fields, or a {KIND} of {API_GROUP}/v1beta1"
        )
    return True
