"""No hand-written module under src/ grows past MAX_MODULE_LINES (issue 40: a module that
grows past about 400 lines holds two ideas; the generated protobuf code is exempt).

The journal commit took checkpoint/mmstore.py to 406 lines without anything noticing;
this test is what notices now."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "numamem"
MAX_MODULE_LINES = 400
GENERATED = ("v1", "nriapi")
"""The packages of generated code (make protos)."""


def hand_written() -> list[Path]:
    return [
        path
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] not in GENERATED
    ]


def test_every_hand_written_module_stays_under_the_bound() -> None:
    modules = hand_written()
    assert len(modules) > 100  # the tree was found
    over = {
        str(path.relative_to(SRC)): lines
        for path in modules
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by idea): {over}"


def test_the_generated_packages_are_the_only_exemption() -> None:
    for package in GENERATED:
        files = list((SRC / package).glob("*_pb2*.py"))
        assert files, package  # still generated code, not a place to hide a module
        hidden = [
            str(p.relative_to(SRC))
            for p in (SRC / package).rglob("*.py")
            if not p.name.endswith(("_pb2.py", "_pb2_grpc.py", "__init__.py"))
        ]
        assert not hidden, f"hand-written modules in a generated package: {hidden}"
