"""``numamem cache`` tables and JSON against the in-process server."""

from __future__ import annotations

import json

import pytest

from numamem.cli.main import main
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
