"""The one quoting helper (numamem.errors.quote) and the message bound (cut_message, status)."""

from __future__ import annotations

import ast
from pathlib import Path

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numamem.api import status
from numamem.errors import (
    CUT_MARK,
    MAX_MESSAGE_BYTES,
    QUOTE_BYTES,
    InvalidArgumentError,
    cut_message,
    quote,
)

# Every code point but the surrogates, which a str from protobuf never holds.
TEXT = st.text(st.characters(exclude_categories=["Cs"]))


@given(TEXT)
def test_short_values_quote_exactly_as_repr(value: str) -> None:
    if len(repr(value).encode()) <= QUOTE_BYTES + 2:
        assert quote(value) == repr(value)


@given(TEXT, st.sampled_from(["python", "go", "bare"]), st.integers(1, 300))
def test_a_quoted_value_is_bounded_and_printable(value: str, style: str, limit: int) -> None:
    quoted = quote(value * 50, style=style, limit=limit)  # type: ignore[arg-type]
    assert len(quoted.encode()) <= limit + 40
    assert quoted.isprintable()


def test_long_values_keep_a_prefix_their_length_and_an_ellipsis() -> None:
    assert quote("a" * 65536) == "'" + "a" * QUOTE_BYTES + "'... (65536 characters)"
    assert quote("a" * 65536, style="go").startswith('"aaa')
    assert quote("a" * 65536, style="bare").endswith("a... (65536 characters)")


@pytest.mark.parametrize(
    ("value", "python", "go", "bare"),
    [
        ("pod-1", "'pod-1'", '"pod-1"', "pod-1"),
        ("it's", '"it\'s"', '"it\'s"', "it's"),
        ('say "x"', "'say \"x\"'", '"say \\"x\\""', 'say "x"'),
        ("a\x00b\nc\x07", "'a\\x00b\\nc\\x07'", '"a\\x00b\\nc\\a"', "a\\x00b\\nc\\x07"),
        (
            "\u200b\U000e0001é",
            "'\\u200b\\U000e0001é'",
            '"\\u200b\\U000e0001é"',
            "\\u200b\\U000e0001é",
        ),
        (42, "42", "42", "42"),
    ],
)
def test_styles(value: object, python: str, go: str, bare: str) -> None:
    assert quote(value) == python
    assert quote(value, style="go") == go
    assert quote(value, style="bare") == bare


def test_escapes_count_against_the_limit() -> None:
    quoted = quote("\x00" * 1000)
    assert quoted.startswith("'\\x00") and quoted.endswith("'... (1000 characters)")
    assert len(quoted) <= QUOTE_BYTES + 40
    wide = quote("🙂" * 1000)
    assert len(wide.encode()) <= QUOTE_BYTES + 40


@given(TEXT)
def test_cut_message_bounds_bytes_and_marks_the_cut(message: str) -> None:
    cut = cut_message(message * 200)
    assert len(cut.encode()) <= MAX_MESSAGE_BYTES
    if len((message * 200).encode()) > MAX_MESSAGE_BYTES:
        assert cut.endswith(CUT_MARK)
    else:
        assert cut == message * 200


def test_status_cuts_what_a_source_left_long() -> None:
    code, message, reason = status.to_status(InvalidArgumentError("x" * 70000))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert len(message.encode()) <= MAX_MESSAGE_BYTES and message.endswith(CUT_MARK)
    built = status.status_with_reason(grpc.StatusCode.NOT_FOUND, "é" * 5000, "NOT_FOUND")
    assert len(built.details.encode()) <= MAX_MESSAGE_BYTES
    trailers = dict(built.trailing_metadata)
    assert len(trailers["grpc-status-details-bin"]) < 2 * MAX_MESSAGE_BYTES


# --- log calls: values clients choose go through quote() ----------------------------------

SRC = Path(__file__).resolve().parents[2] / "src" / "numamem"
LOG_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
CLIENT_FIELDS = frozenset(
    {
        "pod_uid",
        "pod",
        "container",
        "container_name",
        "container_id",
        "pod_name",
        "pod_namespace",
        "namespace",
        "pool",
        "pool_name",
        "region",
        "region_name",
        "metric",
        "metric_name",
    }
)
"""Log fields (and names in a log message's f-string) that hold what a gRPC client sent: a
pod uid or name, a container's name or runtime id, a metacache key."""


def _quoted(value: ast.expr) -> bool:
    """``quote(...)``, a constant, or a count: nothing a client chose reaches the line raw."""
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id in ("quote", "len")
    if isinstance(value, ast.IfExp):
        return _quoted(value.body) and _quoted(value.orelse)
    # ``<...>identity.describe()``: numamem.nri.kube.PodIdentity.describe quotes its parts
    # (test_pod_identity_describe_quotes_its_parts).
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "describe"
        and (
            (isinstance(value.func.value, ast.Attribute) and value.func.value.attr == "identity")
            or (isinstance(value.func.value, ast.Name) and value.func.value.id == "identity")
        )
    )


def _mentions_client_field(value: ast.expr) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in CLIENT_FIELDS)
        or (isinstance(n, ast.Name) and n.id in CLIENT_FIELDS)
        for n in ast.walk(value)
    )


def unquoted_log_values(source: str, filename: str) -> tuple[list[str], int]:
    """``file:line field=expr`` for each log field (or f-string part of a log message) that
    carries a client-chosen value without quote(), and the number of such places checked.
    Log calls are ``<name with "log">.<level>(...)``; ``**fields`` of a dict literal assigned
    to that name in the module is checked too."""
    tree = ast.parse(source)
    found, checked = [], 0
    dicts = {
        target.id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if not (
            isinstance(node, ast.Call)
            and isinstance(func, ast.Attribute)
            and func.attr in LOG_METHODS
            and isinstance(func.value, ast.Name)
            and "log" in func.value.id
        ):
            continue
        fields: list[tuple[str, ast.expr]] = []
        for kw in node.keywords:
            if kw.arg is not None:
                fields.append((kw.arg, kw.value))
            elif isinstance(kw.value, ast.Name) and kw.value.id in dicts:
                d = dicts[kw.value.id]
                fields += [
                    (k.value, v)
                    for k, v in zip(d.keys, d.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                ]
        for arg in node.args:
            if isinstance(arg, ast.JoinedStr):
                fields += [
                    ("message", part.value)
                    for part in arg.values
                    if isinstance(part, ast.FormattedValue) and _mentions_client_field(part.value)
                ]
        for name, value in fields:
            if name in CLIENT_FIELDS or name == "message":
                checked += 1
                if not _quoted(value):
                    found.append(f"{filename}:{value.lineno} {name}={ast.unparse(value)}")
    return sorted(set(found)), checked


def test_log_lines_quote_every_value_a_client_chose() -> None:
    """A pod or container name is a client's: in a log line it goes through quote(), which
    escapes control characters and bounds its length (issue 31). Before this test, the
    placement sampler logged pod uids, container names and cgroup paths raw."""
    found, checked = [], 0
    for path in sorted(SRC.rglob("*.py")):
        if path.parent.name == "v1":
            continue  # generated code
        f, c = unquoted_log_values(path.read_text(), str(path.relative_to(SRC)))
        found += f
        checked += c
    assert found == []
    assert checked >= 15  # the check is not vacuous: the daemon logs such values


def test_the_log_check_finds_raw_values() -> None:
    bad = """
def f(target, request):
    _log.warning("x", pod_uid=target.pod_uid, container=quote(target.container_name))
    log.info(f"released {request.pod_uid}", n=len(request.pods))
    fields = {"container_id": request.container_id, "file": "/x"}
    _log.error("y", **fields)
"""
    found, checked = unquoted_log_values(bad, "bad.py")
    assert found == [
        "bad.py:3 pod_uid=target.pod_uid",
        "bad.py:4 message=request.pod_uid",
        "bad.py:5 container_id=request.container_id",
    ]
    assert checked == 4


def test_pod_identity_describe_quotes_its_parts() -> None:
    """The NRI plugin logs ``identity.describe()`` as a pod field: it escapes and bounds the
    runtime's names (the check above takes it for quoted)."""
    from numamem.nri.kube import PodIdentity

    hostile = PodIdentity(
        uid="u\n1" + "x" * 5000, name="a\u200bb", namespace="ns\x1b[31m", sandbox_id="s"
    )
    text = hostile.describe()
    assert "\n" not in text and "\x1b" not in text and "\u200b" not in text
    assert len(text.encode()) < 2 * (QUOTE_BYTES + 40) + 20
