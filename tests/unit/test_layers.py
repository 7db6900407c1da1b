"""Architecture contracts: lower layers never import higher ones; the two components stay apart."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "numamem"

BASE = {
    "numamem.errors",
    "numamem.quantity",
    "numamem.cpuset",
    "numamem.pod",
    "numamem.logging",
    "numamem.config",
}
# package -> prefixes it must never import
FORBIDDEN = {
    "numamem.topology": [
        "numamem.memorymanager",
        "numamem.topologymanager",
        "numamem.metacache",
        "numamem.checkpoint",
        "numamem.api",
        "numamem.cli",
        "numamem.v1",
        "grpc",
    ],
    "numamem.topologymanager": [
        "numamem.memorymanager",
        "numamem.metacache",
        "numamem.checkpoint",
        "numamem.api",
        "numamem.cli",
        "numamem.v1",
        "grpc",
    ],
    "numamem.memorymanager": [
        "numamem.metacache",
        "numamem.checkpoint",
        "numamem.api",
        "numamem.cli",
        "numamem.v1",
        "grpc",
    ],
    "numamem.metacache": [
        "numamem.memorymanager",
        "numamem.topologymanager",
        "numamem.api",
        "numamem.cli",
        "numamem.v1",
        "grpc",
    ],
    "numamem.checkpoint": ["numamem.metacache", "numamem.api", "numamem.cli", "numamem.v1", "grpc"],
    "numamem.api": ["numamem.cli"],
}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


SOURCES = sorted(p for p in SRC.rglob("*.py") if "/v1/" not in str(p))


@pytest.mark.parametrize("path", SOURCES, ids=[module_name(p) for p in SOURCES])
def test_imports_respect_layers(path: Path) -> None:
    name = module_name(path)
    imported = imports(path)
    if name in BASE:
        inner = {i for i in imported if i.startswith("numamem.") and i not in BASE}
        assert not inner, f"{name} is a base module and imports {sorted(inner)}"
    for package, forbidden in FORBIDDEN.items():
        if name == package or name.startswith(package + "."):
            bad = sorted(i for i in imported for f in forbidden if i == f or i.startswith(f + "."))
            assert not bad, f"{name} must not import {bad}"
