"""The one quoting helper (numamem.errors.quote) and the message bound (cut_message, status)."""

from __future__ import annotations

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
