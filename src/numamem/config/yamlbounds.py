"""YAML read with bounds (issue 38): a short document must not name a large amount of work.

YAML aliases let a few hundred bytes name millions of values (``&a [x, x, ...]``,
``&b [*a, *a, ...]``, ...: a 600-byte ``--config`` whose seven levels expand to 10^7
strings took 2.3 s and 72 MiB to refuse, one more level ten times that), and
``[[[[...]]]]`` nested 20,000 deep raised RecursionError, a traceback at start. A
document is therefore composed first and refused, naming the file, when it

* is longer than :data:`MAX_FILE_BYTES`,
* nests deeper than :data:`MAX_DEPTH`, or refers to itself (a recursive alias),
* or, with every alias expanded, holds more than :data:`MAX_VALUES` values;

only then is it turned into Python values. The bounds are far above any
configuration file (a complete ``KubeletConfiguration`` is a few hundred values,
nested five deep) and make the work of reading one proportional to its bytes.
"""

from __future__ import annotations

from typing import Any

import yaml

from numamem.errors import ConfigError

MAX_FILE_BYTES = 1 << 20
"""The most bytes of a YAML file read (a KubeletConfiguration is a few KiB)."""
MAX_DEPTH = 64
"""The deepest nesting of sequences and mappings."""
MAX_VALUES = 100_000
"""The most values (scalars, sequences and mappings, keys included) with aliases expanded."""

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML has it (its wheels do): it refuses flow nesting past 1000
levels in microseconds, where the pure-Python scanner's time grows with the square of the
depth (20,000 ``[`` took 2 s before its RecursionError)."""


def read_bounded(path: str, where: str) -> str:
    """The file as UTF-8 text, refused when longer than :data:`MAX_FILE_BYTES` (read no
    further). Raises OSError when it cannot be read, UnicodeDecodeError when it is not
    UTF-8, ConfigError (beginning with ``where``, e.g. ``--config '/etc/x.yaml'``) when it
    is too long."""
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: longer than {MAX_FILE_BYTES} bytes (MAX_FILE_BYTES)")
    return data.decode("utf-8")


def compose_bounded(text: str, where: str) -> yaml.Node | None:
    """The document's node graph, checked against :data:`MAX_DEPTH` and :data:`MAX_VALUES`;
    None for an empty document. Raises yaml.YAMLError for bad syntax, ConfigError (beginning
    with ``where``) past a bound."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} deep (MAX_DEPTH)") from None
    if node is not None:
        _check(node, where)
    return node


def construct(node: yaml.Node | None) -> Any:
    """The Python value of a node :func:`compose_bounded` returned (safe types only)."""
    if node is None:
        return None
    return yaml.SafeLoader("").construct_document(node)


def _check(root: yaml.Node, where: str) -> None:
    """Count the values of ``root`` with aliases expanded, without expanding them: each node's
    count is computed once (a DAG walk, iterative so depth costs no Python stack)."""
    counts: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            counts[key] = 1 + sum(counts[id(child)] for child in _children(node))
            if counts[key] > MAX_VALUES:
                raise ConfigError(
                    f"{where}: more than {MAX_VALUES} values (MAX_VALUES) with its "
                    f"aliases expanded, at line {node.start_mark.line + 1}"
                )
            continue
        if key in counts:
            continue
        if key in on_path:
            raise ConfigError(f"{where}: a recursive alias at line {node.start_mark.line + 1}")
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"{where}: nested more than {MAX_DEPTH} deep (MAX_DEPTH) at line "
                f"{node.start_mark.line + 1}"
            )
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
