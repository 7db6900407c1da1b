"""The committed generated code (``numamem.v1``, ``numamem.nriapi``) is what the pinned
generators make of ``proto/`` now."""

from __future__ import annotations

from pathlib import Path

from tests import genproto


def test_generated_code_is_current(tmp_path: Path) -> None:
    fresh = {str(p.relative_to(tmp_path)): p.read_bytes() for p in genproto.generate(tmp_path)}
    src = genproto.REPO / "src"
    ours = {str(p.relative_to(src)): p.read_bytes() for p in genproto.committed()}
    assert sorted(fresh) == sorted(ours), "run `make protos`"
    stale = [name for name, data in fresh.items() if ours[name] != data]
    assert stale == [], f"run `make protos`: {stale} differ from proto/"
    assert len(fresh) == genproto.expected_count()


def test_every_generated_package_is_checked() -> None:
    """A new directory under proto/numamem is generated (and so checked) too."""
    on_disk = sorted(p.name for p in (genproto.PROTO_ROOT / "numamem").iterdir() if p.is_dir())
    assert on_disk == sorted(p.path.name for p in genproto.PACKAGES)


def test_nriapi_has_no_grpc_stubs() -> None:
    """ttrpc is not gRPC: the NRI package holds messages only (no grpc import)."""
    nriapi = genproto.REPO / "src" / "numamem" / "nriapi"
    assert sorted(p.name for p in nriapi.glob("*_grpc*")) == []
    for path in nriapi.glob("*_pb2.py"):
        assert "import grpc" not in path.read_text()
