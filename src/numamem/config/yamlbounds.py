"""YAML read with bounds (issue 38): a short document must not name a large amount of work.

YAML aliases let a few hundred bytes name millions of values (``&a [x, x, ...]``,
``&b [*a, *a, ...]``, ...: a 600-byte ``--config`` whose seven levels expand to 10^7
strings took 2.3 s and 72 MiB to refuse, one more level ten times that), and
``[[[[...]]]]`` nested 20,000 deep raised RecursionError, a traceback at start. A
document is therefore composed first and refused, naming the file, when it

* is longer than :data:`MAX_FILE_BYTES`,
* nests deeper than :data:`MAX_DEPTH`, or refers to itself (a recursive alias),
* or, with every alias expanded, holds more than :data:`MAX_VALUES` values,
* or holds a number (an ``!!int``/``!!float`` scalar, tagged or resolved) longer than
  :data:`MAX_NUMBER_CHARS` characters (issue 40: PyYAML builds a base-60 ``1:1:1:...``
  with ``base *= 60`` a part, time the square of its length: 64 KiB took 1.2 s, 256 KiB
  15 s);

only then is it turned into Python values. The bounds are far above any
configuration file (a complete ``KubeletConfiguration`` is a few hundred values,
nested five deep) and make the work of reading one proportional to its bytes.
Readers of other YAML (the CLI's Pod manifests, :mod:`numamem.cli.podfile`) give their
own byte and value bounds and read several documents with :func:`compose_all_bounded`.
"""

from __future__ import annotations

from typing import Any

import yaml

from numamem.errors import ConfigError, quote

MAX_FILE_BYTES = 1 << 20
"""The most bytes of a YAML file read (a KubeletConfiguration is a few KiB)."""
MAX_DEPTH = 64
"""The deepest nesting of sequences and mappings."""
MAX_VALUES = 100_000
"""The most values (scalars, sequences and mappings, keys included) with aliases expanded."""
MAX_NUMBER_CHARS = 64
"""The longest int or float scalar, in characters (underscores and signs included). A
configuration's or a manifest's longest number is an int64 (19 digits) or a float's
``repr`` (24 characters); quantities (``1Gi``) are strings. Checked before any number is
built: PyYAML's base-60 ints cost the square of their length, a decimal int of more than
4300 digits is refused by Python's ``int()`` only after the resolver and the constructor
have read it, and a binary one (``0b111...``) is built whatever its length."""

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML has it (its wheels do): it refuses flow nesting past 1000
levels in microseconds, where the pure-Python scanner's time grows with the square of the
depth (20,000 ``[`` took 2 s before its RecursionError)."""


def read_bounded(
    path: str, where: str, max_bytes: int = MAX_FILE_BYTES, bound: str = "MAX_FILE_BYTES"
) -> str:
    """The file as UTF-8 text, refused when longer than ``max_bytes`` (read no further;
    ``bound`` names the limit in the message). Raises OSError when it cannot be read,
    UnicodeDecodeError when it is not UTF-8, ConfigError (beginning with ``where``, e.g.
    ``--config '/etc/x.yaml'``) when it is too long."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{where}: longer than {max_bytes} bytes ({bound})")
    return data.decode("utf-8")


def compose_bounded(text: str, where: str) -> yaml.Node | None:
    """The document's node graph, checked against :data:`MAX_DEPTH` and :data:`MAX_VALUES`;
    None for an empty document. Raises yaml.YAMLError for bad syntax, ConfigError (beginning
    with ``where``) past a bound."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} deep (MAX_DEPTH)") from None
    except yaml.YAMLError as err:
        raise _too_deep(err, where, MAX_DEPTH) or err from None
    if node is not None:
        _check(node, where, MAX_VALUES, "MAX_VALUES")
    return node


def compose_all_bounded(
    text: str, where: str, max_values: int, bound: str, max_depth: int = MAX_DEPTH
) -> list[yaml.Node]:
    """Every document's node graph (empty ones left out), refused past ``max_depth`` or
    past ``max_values`` values in all documents together with aliases expanded (``bound``
    names that limit in the message). Raises as :func:`compose_bounded`."""
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=_LOADER) if n is not None]
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {max_depth} deep (MAX_DEPTH)") from None
    except yaml.YAMLError as err:
        raise _too_deep(err, where, max_depth) or err from None
    left = max_values
    for node in nodes:
        left -= _check(node, where, left, bound, max_depth)
    return nodes


def load_mapping(
    text: str, where: str, expected: str = "fields"
) -> tuple[dict[object, object], dict[object, int]] | None:
    """A YAML document that must be a mapping, read within the bounds of
    :func:`compose_bounded`: the mapping and each top-level key's 1-based line (for the
    messages); None for an empty document. Refuses (ConfigError beginning with ``where``)
    text that is not YAML (naming the line and the problem), a document past a bound, and
    one that is not a mapping (``expected`` says what its keys are, for the message)."""
    try:
        node = compose_bounded(text, where)
        doc = construct(node)
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        at = f" at line {line + 1}" if line is not None else ""
        problem = getattr(err, "problem", None)
        why = f": {quote(problem, style='bare')}" if problem else ""
        raise ConfigError(f"{where}: not valid YAML{at}{why}") from err
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a mapping of {expected}, got {type(doc).__name__}")
    return doc, _key_lines(node)


def _key_lines(node: yaml.Node | None) -> dict[object, int]:
    """Top-level key -> its 1-based line."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    loader = yaml.SafeLoader("")
    out: dict[object, int] = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            out.setdefault(loader.construct_object(key_node), key_node.start_mark.line + 1)
    return out


def _too_deep(err: yaml.YAMLError, where: str, max_depth: int) -> ConfigError | None:
    """libyaml's own nesting limit (1000 levels, far past ``max_depth``) as the refusal of
    ``max_depth``; None for any other YAML error."""
    if "maximum nesting depth" not in str(getattr(err, "problem", "") or ""):
        return None
    mark = getattr(err, "problem_mark", None)
    line = f" at line {mark.line + 1}" if mark is not None else ""
    return ConfigError(f"{where}: nested more than {max_depth} deep (MAX_DEPTH){line}")


def construct(node: yaml.Node | None) -> Any:
    """The Python value of a node :func:`compose_bounded` returned (safe types only)."""
    if node is None:
        return None
    return yaml.SafeLoader("").construct_document(node)


def _check(
    root: yaml.Node, where: str, max_values: int, bound: str, max_depth: int = MAX_DEPTH
) -> int:
    """Count the values of ``root`` with aliases expanded, without expanding them: each node's
    count and height are computed once (a DAG walk, iterative so depth costs no Python
    stack), and a node reached again through an alias is checked against the depth it is
    reached at plus its height (an anchor nested deep and aliased first near the top nests
    as deep where it is written). Refuses past ``max_values`` or ``max_depth``, and a
    scalar whose tag does not take its value (:func:`_check_scalar`). Returns the count."""
    counts: dict[int, int] = {}
    heights: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            counts[key] = 1 + sum(counts[id(child)] for child in children)
            heights[key] = 1 + max((heights[id(child)] for child in children), default=0)
            if counts[key] > max_values:
                raise ConfigError(
                    f"{where}: more than {max_values} values ({bound}) with its "
                    f"aliases expanded, at line {node.start_mark.line + 1}"
                )
            continue
        if key in counts:
            if depth + heights[key] - 1 > max_depth:
                raise _nested(where, max_depth, node)
            continue
        if key in on_path:
            raise ConfigError(f"{where}: a recursive alias at line {node.start_mark.line + 1}")
        if depth > max_depth:
            raise _nested(where, max_depth, node)
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(node, where)
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in _children(node))
    return counts[id(root)]


def _nested(where: str, max_depth: int, node: yaml.Node) -> ConfigError:
    return ConfigError(
        f"{where}: nested more than {max_depth} deep (MAX_DEPTH) at line {node.start_mark.line + 1}"
    )


_SCALARS: Any = yaml.SafeLoader("")
"""Constructs single scalars for :func:`_check_scalar` (keeps no state between them)."""
_PLAIN = frozenset({"tag:yaml.org,2002:str", "tag:yaml.org,2002:null"})
_NUMBERS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})


def _check_scalar(node: yaml.ScalarNode, where: str) -> None:
    """Refuse a scalar that its tag's constructor fails on with a Python error (``!!int
    Static``: ValueError, ``!!timestamp yesterday``: AttributeError, ``2020-13-45``: a
    timestamp with no such date), naming the tag, the value and the line; PyYAML raises
    those as they are, no YAMLError. Unknown tags are left to construction (a YAMLError).
    A number longer than :data:`MAX_NUMBER_CHARS` is refused before it is built."""
    if node.tag in _NUMBERS and len(node.value) > MAX_NUMBER_CHARS:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise ConfigError(
            f"{where}: at line {node.start_mark.line + 1}: {quote(node.value, limit=40)} "
            f"is a {tag} longer than {MAX_NUMBER_CHARS} characters (MAX_NUMBER_CHARS): "
            "no field takes a number that long; shorten it, or quote it (without the tag) "
            "to make it a string"
        )
    make = _SCALARS.yaml_constructors.get(node.tag)
    if node.tag in _PLAIN or make is None:
        return
    try:
        make(_SCALARS, node)
    except yaml.YAMLError:
        return  # construction says it, with its mark
    except (ValueError, TypeError, AttributeError, OverflowError, IndexError):
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise ConfigError(
            f"{where}: at line {node.start_mark.line + 1}: {quote(node.value, limit=80)} "
            f"is not a valid {tag} value: give a valid one, or quote it "
            "(without the tag) to make it a string"
        ) from None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
