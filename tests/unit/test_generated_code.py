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
    assert len(fresh) == 4 * len(genproto.protos())
