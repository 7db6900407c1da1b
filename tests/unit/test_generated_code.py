"""The committed generated code is what the pinned generators make of the .proto files now."""

from __future__ import annotations

from pathlib import Path

from tests import genproto


def test_generated_code_is_current(tmp_path: Path) -> None:
    fresh = {genproto.relative(p): p.read_bytes() for p in genproto.generate(tmp_path)}
    ours = {genproto.relative(p): p.read_bytes() for p in genproto.committed()}
    assert sorted(fresh) == sorted(ours), "run `make protos`"
    stale = [str(name) for name, data in fresh.items() if ours[name] != data]
    assert stale == [], f"run `make protos`: {stale} differ from their .proto"
    assert len(fresh) == genproto.expected_count()


def test_every_package_under_proto_numamem_is_generated() -> None:
    """A new directory of .proto files under proto/numamem is a target (and so checked) too."""
    root = genproto.REPO / "proto" / "numamem"
    on_disk = sorted(p.name for p in root.iterdir() if p.is_dir())
    listed = [t.package for t in genproto.TARGETS if t.proto_root == genproto.REPO / "proto"]
    assert on_disk == sorted(p.name for p in listed)


def test_nriapi_has_no_grpc_stubs() -> None:
    """ttrpc is not gRPC: the NRI package holds messages only (no grpc import)."""
    nriapi = genproto.REPO / "src" / "numamem" / "nriapi"
    assert sorted(p.name for p in nriapi.glob("*_grpc*")) == []
    for path in nriapi.glob("*_pb2.py"):
        assert "import grpc" not in path.read_text()
