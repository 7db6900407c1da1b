"""A CLI that starts fast (issue 38): ``numamem --version`` and ``numamem health`` import only
what they need. The figures are ``make bench``'s (phase ``cli``); these tests check the
import sets in a fresh interpreter, and that what health does without protobuf is what
protobuf does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from numamem.cli import health_wire
from numamem.cli.main import ALL, COMMANDS, build_parser, main
from numamem.testing.server import InProcessServer
from numamem.version import UNKNOWN, commit, describe
from tests.properties import examples

HEAVY = (
    "numamem.v1",  # the generated code and with it the protobuf runtime
    "google.protobuf",
    "numamem.client",
    "numamem.api",
    "numamem.config",
    "numamem.logging",
    "structlog",
    "yaml",
    "psutil",
    "shutil",  # argparse's formatter imports it (and bz2, lzma) for the terminal's width
)


def imported_by(*argv: str) -> tuple[int, set[str]]:
    """The exit code of ``main(argv)`` in a fresh interpreter and the modules it imported."""
    code = (
        "import json, sys\n"
        "from numamem.cli.main import main\n"
        "try:\n"
        f"    rc = main({list(argv)!r})\n"
        "except SystemExit as e:\n"
        "    rc = e.code\n"
        "print(json.dumps([rc, sorted(sys.modules)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    rc, modules = json.loads(out.stdout.splitlines()[-1])
    return rc, set(modules)


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_version_imports_neither_grpc_nor_any_command() -> None:
    rc, modules = imported_by("--version")
    assert rc == 0
    assert heavy(modules) == []
    assert "grpc" not in modules and "typing" not in modules
    assert sorted(m for m in modules if m.startswith("numamem")) == [
        "numamem",
        "numamem.cli",
        "numamem.cli.main",
        "numamem.version",  # the commit (review of issue 38); make bench: 2.7x the floor
    ]


def test_version_says_the_commit(capsys: pytest.CaptureFixture[str]) -> None:
    """Review of issue 38: ``--version`` printed the version alone; it says the commit as the
    daemon's start-up line and build_info do (here: this checkout's HEAD)."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == describe() + "\n"
    if commit() != UNKNOWN:
        assert describe().endswith(f" (commit {commit()[:12]})")


def test_health_imports_grpc_and_nothing_heavy(numamem_server: InProcessServer) -> None:
    rc, modules = imported_by("health", "--socket", numamem_server.socket)
    assert rc == 0
    assert "grpc" in modules
    assert heavy(modules) == []
    assert sorted(m for m in modules if m.startswith("numamem")) == [
        "numamem",
        "numamem.cli",
        "numamem.cli.common",
        "numamem.cli.health",
        "numamem.cli.health_wire",
        "numamem.cli.main",
    ]


def test_nri_status_imports_neither_grpc_nor_anything_heavy(tmp_path: Path) -> None:
    """The plugin container's probe runs every 10 s: the standard library only."""
    rc, modules = imported_by("nri-status", "--status-socket", str(tmp_path / "none.sock"))
    assert rc == 1  # nothing serves there
    assert "grpc" not in modules
    assert heavy(modules) == []
    assert sorted(m for m in modules if m.startswith("numamem")) == [
        "numamem",
        "numamem.cli",
        "numamem.cli.common",
        "numamem.cli.main",
        "numamem.cli.nristatus",
    ]


def test_a_client_command_still_gets_what_it_needs(numamem_server: InProcessServer) -> None:
    """The lazy table loads the named command's module (and its imports), nothing less."""
    rc, modules = imported_by("topology", "--socket", numamem_server.socket)
    assert rc == 0
    assert {"numamem.cli.topology", "numamem.client", "numamem.v1.topology_pb2"} <= modules
    assert "numamem.cli.memory" not in modules and "yaml" not in modules


def _helps(only: str | None) -> dict[str, str | None]:
    parser = build_parser(only)
    [action] = [a for a in parser._actions if a.dest == "command"]
    return {a.dest: a.help for a in action._choices_actions}


def test_the_listed_help_of_every_command_is_its_parsers() -> None:
    """``numamem --help`` lists every command from the table without importing its module:
    each line must be what the command's own parser says."""
    assert list(_helps(None)) == list(COMMANDS)
    assert _helps(None) == _helps(ALL)
    for name in COMMANDS:
        assert _helps(name) == _helps(None), name


def test_help_with_a_command_after_it_still_lists_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help", "health"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in COMMANDS)


def test_the_default_socket_is_the_configurations() -> None:
    from numamem.cli.common import DEFAULT_SOCKET
    from numamem.config.model import DEFAULT_SOCKET as CONFIGURED

    assert DEFAULT_SOCKET == CONFIGURED


def test_health_of_an_unknown_service(
    numamem_server: InProcessServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["health", "--service", "no.such.Service", "--socket", numamem_server.socket]
    assert main(argv) == 1
    assert "service 'no.such.Service' is not known to the daemon" in capsys.readouterr().err
    assert main(["health", "--service", "numamem.v1.MemoryManager", *argv[3:]]) == 0
    assert capsys.readouterr().out == "SERVING\n"


# --- health's two messages, against the generated code ---------------------------------


@given(st.text())
def test_the_request_is_what_protobuf_encodes(service: str) -> None:
    expected = health_pb2.HealthCheckRequest(service=service).SerializeToString()
    assert health_wire.encode_request(service) == expected


_FIELD = st.one_of(
    st.tuples(st.just(1), st.just(2), st.binary(max_size=5)),
    st.tuples(st.integers(1, 40), st.just(0), st.integers(0, (1 << 64) - 1)),
    st.tuples(st.integers(1, 40), st.just(1), st.binary(min_size=8, max_size=8)),
    st.tuples(st.integers(1, 40), st.just(2), st.binary(max_size=40)),
    st.tuples(st.integers(1, 40), st.just(5), st.binary(min_size=4, max_size=4)),
)


def _encode(fields: list[tuple[int, int, int | bytes]]) -> bytes:
    out = b""
    for number, wire, value in fields:
        out += health_wire._varint(number << 3 | wire)
        if isinstance(value, int):
            out += health_wire._varint(value)
        elif wire == 2:
            out += health_wire._varint(len(value)) + value
        else:
            out += value
    return out


def _same_as_protobuf(data: bytes) -> None:
    """decode_response refuses ``data`` exactly when protobuf does, else reads its status."""
    message = health_pb2.HealthCheckResponse()
    try:
        message.ParseFromString(data)
    except Exception:
        with pytest.raises(ValueError):
            health_wire.decode_response(data)
        return
    assert health_wire.decode_response(data) == message.status


@given(st.lists(_FIELD, max_size=8))
def test_the_response_decodes_as_protobuf_decodes_it(
    fields: list[tuple[int, int, int | bytes]],
) -> None:
    """Any status (unknown ones, negative ones, repeated, field 1 of another wire type), any
    other fields of any wire type."""
    _same_as_protobuf(_encode(fields))


@given(st.binary(max_size=64))
def test_any_bytes_decode_as_protobuf_decodes_them(data: bytes) -> None:
    """Groups, truncations, field number 0, stray ends of groups: refused or read alike."""
    _same_as_protobuf(data)


_NUMBERS = st.sampled_from([0, 0, 0, 1, 2, 3, 16, (1 << 29) - 1, 1 << 29, (1 << 32) - 1])
"""Field numbers at the edges: 0 (refused at the top level, skipped inside a group), the
largest valid one, the first invalid one, one whose key needs more than 32 bits."""
_TOP_NUMBERS = st.sampled_from([1, 1, 2, 3, 3, 3, 3, 16, (1 << 29) - 1, 0])
"""At the top level mostly valid numbers, so that what follows (a group's insides) decides."""


@st.composite
def _key(draw: st.DrawFn, number: int, wire: int) -> bytes:
    """A key, sometimes encoded longer than needed (protobuf refuses a key of more than 5
    bytes, however small its value)."""
    out = bytearray(health_wire._varint(number << 3 | wire))
    padding = draw(st.sampled_from([0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 5]))
    if padding:
        out[-1] |= 0x80
        out += b"\x80" * (padding - 1) + b"\x00"
    return bytes(out)


@st.composite
def _wire_fields(draw: st.DrawFn, depth: int = 0) -> bytes:
    """Up to 4 fields of any wire type (6 and 7 too), groups nested up to 3 deep holding the
    same, ended by their own number or (sometimes) another."""
    out = b""
    for _ in range(draw(st.integers(0 if depth else 1, 3))):
        number = draw(_NUMBERS if depth else _TOP_NUMBERS)
        wire = draw(st.sampled_from([0, 0, 0, 1, 2, 2, 3, 3, 3, 5, 5, 4, 6, 7]))
        out += draw(_key(number, wire))
        if wire == 0:
            out += health_wire._varint(draw(st.sampled_from([0, 1, 2, 3, 1 << 31, (1 << 64) - 1])))
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            out += draw(
                st.binary(min_size=size - draw(st.sampled_from([0, 0, 0, 0, 0, 1])), max_size=size)
            )
        elif wire == 2:
            value = draw(st.binary(max_size=3))
            out += health_wire._varint(len(value) + draw(st.sampled_from([0, 0, 0, 0, 1]))) + value
        elif wire == 3 and depth < 3:
            out += draw(_wire_fields(depth + 1))
            end = draw(st.sampled_from([number, number, number, number, number, 0, 1 << 29]))
            out += draw(_key(end, 4))
    return out


@settings(max_examples=examples(300))  # about 5% of the replies drawn hit the case the review found
@given(_wire_fields(), st.integers(0, 64))
def test_groups_and_edge_keys_decode_as_protobuf_decodes_them(data: bytes, cut: int) -> None:
    """Review of issue 38: 85 of 200,000 random structured replies were refused by the codec
    and read (UNKNOWN) by protobuf: field 0 inside a group, which the flat fields and the 64
    random bytes above never build. Measured beside this test: 400,000 such replies (and
    300,000 random byte strings) decode alike."""
    _same_as_protobuf(data)
    _same_as_protobuf(data[:cut])  # truncated anywhere


@pytest.mark.parametrize(
    "reply",
    [
        "0b05000000000c",  # group 1 { field 0 (fixed32) 0 } end 1: the review's
        "1b055f565af51c",  # group 3 { field 0 (fixed32) } end 3: found by the review's fuzz
        "0b03040c",  # group 1 { group 0 { } } end 1
        "0b04",  # group 1 ended by field 0
        "0b808080808000000c",  # a 6-byte key of field 0 inside a group
    ],
)
def test_field_zero_inside_a_group_decodes_as_protobuf(reply: str) -> None:
    _same_as_protobuf(bytes.fromhex(reply))


def test_groups_are_skipped_as_protobuf_skips_them() -> None:
    group = bytes([3 << 3 | 3, 1 << 3 | 0, 2, 3 << 3 | 4])  # group 3 {field 1: 2} end
    _same_as_protobuf(group + bytes([1 << 3 | 0, 1]))
    assert health_wire.decode_response(group + bytes([1 << 3 | 0, 1])) == 1
    _same_as_protobuf(bytes([3 << 3 | 4]))  # an end without a start
    _same_as_protobuf(bytes([3 << 3 | 3, 4 << 3 | 4]))  # ended by another field


def test_every_status_name_is_protobufs() -> None:
    names = health_pb2.HealthCheckResponse.ServingStatus
    assert {v: names.Name(v) for v in names.values()} == health_wire.STATUS_NAMES
    assert names.Value("SERVING") == health_wire.SERVING
