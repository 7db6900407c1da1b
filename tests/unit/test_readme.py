"""README.md stays true: the generated flag reference, grpcurl for every RPC, real refusal messages."""

from __future__ import annotations

import re
from pathlib import Path

from numamem.v1 import memorymanager_pb2, metacache_pb2, topology_pb2
from tests.readme_docs import (
    README,
    REFUSALS_BEGIN,
    REFUSALS_END,
    current_block,
    current_flag_reference,
    examples,
    render_flag_reference,
    render_refusals,
    section,
    shell_blocks,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "numamem"


def readme() -> str:
    return README.read_text()


def test_flag_reference_is_current() -> None:
    assert current_flag_reference(readme()) == render_flag_reference(), (
        "README.md's configuration reference is stale: run `make docs`"
    )


def test_refusal_examples_are_current() -> None:
    """The troubleshooting section shows refusals exactly as numamem prints them."""
    current = current_block(readme(), REFUSALS_BEGIN, REFUSALS_END)
    assert current == render_refusals(), "README.md's refusal examples are stale: run `make docs`"


def test_every_rpc_has_a_grpcurl_example() -> None:
    [block] = shell_blocks(section(readme(), "gRPC API"))
    commands = " ".join(e.command for e in examples(block))
    for module in (topology_pb2, memorymanager_pb2, metacache_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                assert f"{service.full_name}/{method.name}" in commands, (
                    f"README '## gRPC API' lacks a grpcurl call of {service.full_name}/{method.name}"
                )


def _source_text() -> str:
    """All of src/numamem with adjacent string literals joined ("a " "b" -> "a b")."""
    text = "\n".join(p.read_text() for p in sorted(SRC.rglob("*.py")))
    return re.sub(r"\"\s*\n\s*f?\"", "", text)


def test_troubleshooting_quotes_messages_the_daemon_really_prints() -> None:
    rows = [
        line for line in section(readme(), "Troubleshooting").splitlines() if line.startswith("| `")
    ]
    assert len(rows) >= 15
    source = _source_text()
    for row in rows:
        for fragment in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            assert fragment in source, f"Troubleshooting quotes {fragment!r}, which no code prints"
