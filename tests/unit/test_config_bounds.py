"""Issue 38 in ``--config``: a short YAML document must not name a large amount of work.

Aliases that expand to millions of values, nesting thousands deep, a recursive alias and
a file of megabytes, a number of thousands of characters are refused naming the file and
the bound (:mod:`numamem.config.yamlbounds`); anchors within the bounds still work. Costs are checked
on the memory counted (tracemalloc), not on time.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from numamem.config.model import Config
from numamem.config.yamlbounds import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NUMBER_CHARS,
    MAX_VALUES,
    compose_all_bounded,
    compose_bounded,
    construct,
    load_mapping,
)
from numamem.config.yamlfile import apply_yaml
from numamem.errors import ConfigError

KUBELET = "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n"


def _bomb(levels: int, field: str) -> str:
    """Ten values, then ``levels`` lists of ten aliases of the one before: 10^(levels+1)
    strings in ~40 bytes a level, under a kubelet field numamem ignores."""
    lines = ["clusterDNS:", '- &l0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"- &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return KUBELET + "\n".join(lines) + f"\n{field}: *l{levels}\n"


def _refusal(tmp_path: Path, text: str) -> tuple[str, int]:
    """The ConfigError of ``text`` as a --config file, and the peak of Python allocations."""
    path = tmp_path / "numamem.yaml"
    path.write_text(text)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as info:
            apply_yaml(Config(), str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value)
    return str(info.value), peak


@pytest.mark.parametrize("field", ["topologyManagerPolicy", "reservedMemory", "featureGates"])
def test_aliases_that_expand_past_max_values_are_refused_unexpanded(
    tmp_path: Path, field: str
) -> None:
    """A 600-byte file naming 10^7 strings took 2.3 s and 72 MiB to refuse (its value was
    quoted in full); one more level, ten times that."""
    message, peak = _refusal(tmp_path, _bomb(6, field))
    assert f"more than {MAX_VALUES} values (MAX_VALUES) with its aliases expanded" in message
    assert peak < 4 << 20  # the expansion quoted in full: 50 MB and more


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "featureGates: " + "[" * 20000 + "]" * 20000 + "\n",
            f"nested more than {MAX_DEPTH} deep (MAX_DEPTH) at line 1",  # libyaml's limit, named
        ),
        (
            "featureGates:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 100)) + "  x: 1\n",
            f"nested more than {MAX_DEPTH} deep (MAX_DEPTH) at line {MAX_DEPTH + 1}",
        ),
        ("featureGates: &a [*a]\n", "a recursive alias at line 1"),
        ("# filler\n" * (MAX_FILE_BYTES // 9 + 1), f"longer than {MAX_FILE_BYTES} bytes"),
    ],
    ids=["flow-nesting", "block-nesting", "recursive-alias", "too-long"],
)
def test_documents_past_a_bound_are_refused_naming_it(
    tmp_path: Path, text: str, fragment: str
) -> None:
    """Flow nesting 20,000 deep raised RecursionError (a traceback at start); the others were
    read whole or expanded."""
    message, peak = _refusal(tmp_path, text)
    assert fragment in message
    assert peak < 4 * MAX_FILE_BYTES


def test_anchors_within_the_bounds_still_work(tmp_path: Path) -> None:
    path = tmp_path / "numamem.yaml"
    path.write_text(
        KUBELET + "systemReserved: &r {memory: 1Gi}\nkubeReserved: *r\n"
        "memoryManagerPolicy: Static\n"
    )
    cfg = apply_yaml(Config(), str(path))
    assert cfg.memory_manager_policy == "Static"
    assert cfg.system_reserved == cfg.kube_reserved and "1Gi" in str(cfg.kube_reserved)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("memoryManagerPolicy: !!int Static", "'Static' is not a valid !!int value"),
        ("memoryManagerPolicy: !!float Static", "'Static' is not a valid !!float value"),
        ("memoryManagerPolicy: !!timestamp yesterday", "'yesterday' is not a valid !!timestamp"),
        ("clusterDNS: [2020-13-45]", "'2020-13-45' is not a valid !!timestamp value"),
    ],
)
def test_a_value_its_tag_does_not_take_is_a_refusal_naming_the_line(
    tmp_path: Path, line: str, shown: str
) -> None:
    """Review 38b: PyYAML's constructors raise ValueError/AttributeError, no YAMLError, so
    ``!!int Static`` was a traceback at ``serve`` and ``serve --check``."""
    refusal, _ = _refusal(tmp_path, KUBELET + line + "\n")
    assert f"at line 3: {shown}" in refusal


def _anchor_chain(levels: int, each: int) -> str:
    """``&B0 [[...[&B1 [[...[ ... ]]]]]]`` (``each`` brackets a level), then ``bK: *BK``:
    every anchor is first reached through its alias, near the top."""

    def nest(k: int) -> str:
        return "0" if k > levels else f"&B{k} " + "[" * each + nest(k + 1) + "]" * each

    refs = "".join(f"b{k}: *B{k}\n" for k in range(1, levels + 1))
    return f"memoryManagerPolicy: {nest(0)}\n{refs}"


def test_max_depth_holds_through_anchors_reached_first_by_an_alias(tmp_path: Path) -> None:
    """Review 38b: a node was checked at the depth it was first reached at: 17 anchors of 58
    levels, each aliased at depth 2 by a later key, nested 986 deep and passed."""
    refusal, _ = _refusal(tmp_path, _anchor_chain(16, MAX_DEPTH - 6))
    assert f"nested more than {MAX_DEPTH} deep (MAX_DEPTH)" in refusal
    shallow = tmp_path / "shallow.yaml"  # the same shape within the bound is read
    shallow.write_text(KUBELET + "clusterDNS: &a [[x]]\nb: *a\n")
    with pytest.raises(ConfigError, match=r"^b \(in .*, line 4\): unknown field"):
        apply_yaml(Config(), str(shallow))  # composed and read: past the bounds


SEXAGESIMAL = "1" + ":1" * 32_000
"""A 64 KiB base-60 int: PyYAML builds it with ``base *= 60`` a part, 1.2 s here (256 KiB:
11 to 15 s, the 1 MiB MAX_FILE_BYTES allows about three minutes), twice (the tag check
built it once more before construction)."""


@pytest.mark.parametrize(
    "line",
    [
        f"memoryManagerPolicy: {SEXAGESIMAL}",
        f"memoryManagerPolicy: {SEXAGESIMAL}.5",  # a base-60 float
        f"memoryManagerPolicy: !!int '{SEXAGESIMAL}'",  # tagged, not resolved
        f"? {SEXAGESIMAL}\n: Static",  # a key (a long one is written with ?)
        "memoryManagerPolicy: " + "1" * 1_000_000,  # past int()'s 4300 digits
        "memoryManagerPolicy: 0b" + "1" * 1_000_000,  # binary: no int() limit
        "memoryManagerPolicy: 1" + "0" * 100 + ".5",
    ],
    ids=["sexagesimal", "sexagesimal-float", "tagged", "key", "decimal", "binary", "float"],
)
def test_a_number_past_max_number_chars_is_refused_before_it_is_built(
    tmp_path: Path, line: str
) -> None:
    """Review 40: the base-60 cases were read (in the square of their length); the long
    decimal was refused as ``not a valid !!int value`` after being read, the binary read."""
    refusal, _ = _refusal(tmp_path, KUBELET + line + "\n")
    assert "at line 3: '" in refusal
    assert f"longer than {MAX_NUMBER_CHARS} characters (MAX_NUMBER_CHARS)" in refusal
    assert len(refusal) < 600  # the value is shortened


def test_every_reader_refuses_a_long_number() -> None:
    """``load_mapping`` (``--config``, the NRI plugin's config), ``compose_bounded`` then
    ``construct``, and ``compose_all_bounded`` (the CLI's Pod manifests)."""
    text = f"memoryManagerPolicy: {SEXAGESIMAL}\n"
    bound = "MAX_NUMBER_CHARS"
    with pytest.raises(ConfigError, match=f"^--config 'x.yaml': at line 1: .*{bound}"):
        construct(compose_bounded(text, "--config 'x.yaml'"))
    with pytest.raises(ConfigError, match=f"^--config 'x.yaml': at line 1: .*{bound}"):
        load_mapping(text, "--config 'x.yaml'")
    with pytest.raises(ConfigError, match=f"^pod.yaml: at line 3: .*{bound}"):
        compose_all_bounded("a: 1\n---\n" + text, "pod.yaml", MAX_VALUES, "MAX_VALUES")


def test_numbers_within_max_number_chars_are_read() -> None:
    longest = "9" * MAX_NUMBER_CHARS
    text = f"a: {longest}\nb: 1:30:00\nc: 1.7976931348623157e+308\nd: -9223372036854775808\n"
    read = load_mapping(text, "x")
    assert read is not None
    assert read[0] == {
        "a": int(longest),
        "b": 5400,
        "c": 1.7976931348623157e308,
        "d": -9223372036854775808,
    }
