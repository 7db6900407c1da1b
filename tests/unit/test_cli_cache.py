"""``numamem cache`` tables and JSON against the in-process server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from numamem.api.statedir import acquire_lock
from numamem.cli.main import main
from numamem.metacache.cache import MetaCache
from numamem.metacache.journal import JOURNAL_FILE, header
from numamem.metacache.journal_store import JournalPersister
from numamem.metacache.persistence import STATE_FILE, decode_snapshot, encode
from numamem.metacache.types import ContainerInfo, PoolInfo
from numamem.testing.server import InProcessServer
from numamem.v1 import metacache_pb2 as mc


def test_cache_tables_and_json(
    numamem_server: InProcessServer, capsys: pytest.CaptureFixture[str]
) -> None:
    c = numamem_server.client
    c.add_container_info(
        mc.ContainerInfo(
            pod_uid="p1",
            container_name="app",
            qos_level="shared_cores",
            cpu_request=2,
            owner_pool_name="share",
            topology_aware_assignments={0: "0-3"},
            region_names=["r1"],
        )
    )
    c.set_pool_info(mc.PoolInfo(pool_name="share", topology_aware_assignments={0: "0-3"}))
    c.set_region_info(mc.RegionInfo(region_name="r1", region_type="share", headroom=1.5))
    assert main(["cache", "--socket", numamem_server.socket]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["p1", "app", "shared_cores", "2", "0", "share", "0:0-3", "r1"]
    assert any(line.split()[:2] == ["share", "0:0-3"] for line in out)
    assert any(line.split()[:3] == ["r1", "share", "-"] for line in out)
    assert main(["cache", "pools", "--json", "--socket", numamem_server.socket]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {
        "pools": [
            {
                "pool_name": "share",
                "topology_aware_assignments": {"0": "0-3"},
                "original_topology_aware_assignments": {},
                "region_names": [],
            }
        ]
    }


def test_cache_export_folds_the_journal_into_the_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    persister = JournalPersister(tmp_path, background=False, min_compact_bytes=10**12)
    persister.restored()
    cache = MetaCache(persister)
    cache.set_container_info("p", "c", ContainerInfo(pod_uid="p", container_name="c"))
    cache.set_pool_info("share", PoolInfo(pool_name="share"))
    # As after SIGKILL: the changes are in the journal only.
    assert b'"p"' not in (tmp_path / STATE_FILE).read_bytes()
    assert main(["cache", "export", "--state-dir", str(tmp_path)]) == 0
    assert "1 container, 1 pool, 0 regions" in capsys.readouterr().out
    state, generation = decode_snapshot((tmp_path / STATE_FILE).read_bytes())
    assert encode(state) == encode(cache.state())
    assert (tmp_path / JOURNAL_FILE).read_bytes() == header(generation)
    assert not (tmp_path / "numamem.lock").exists()
    snapshot = (tmp_path / STATE_FILE).read_bytes()
    assert main(["cache", "export", "--state-dir", str(tmp_path)]) == 0  # idempotent
    assert (tmp_path / STATE_FILE).read_bytes() == snapshot


def test_cache_export_refuses_while_the_daemon_holds_the_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fd, _ = acquire_lock(tmp_path / "numamem.lock")
    try:
        assert main(["cache", "export", "--state-dir", str(tmp_path)]) == 1
    finally:
        os.close(fd)
    assert "another numamem" in capsys.readouterr().err


def test_cache_export_of_a_corrupt_or_missing_state_fails_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cache", "export", "--state-dir", str(tmp_path)]) == 1
    assert "no metacache state" in capsys.readouterr().err
    (tmp_path / STATE_FILE).write_bytes(b'{"checksum":1,"pod_entries":{}}')
    assert main(["cache", "export", "--state-dir", str(tmp_path)]) == 1
    assert "corrupt" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE]
