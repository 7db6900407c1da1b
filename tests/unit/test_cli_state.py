"""``numamem state show`` and ``numamem state verify`` offline on a state dir."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.cli.main import main
from numamem.memorymanager.manager import Manager
from numamem.memorymanager.policy_static import StaticPolicy
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity
from numamem.topology import HugePagePool, Machine, NUMANode
from tests.daemon import data_path

GI = 1024**3


def written_state(state_dir: Path) -> None:
    machine = Machine(tuple(NUMANode(i, 8 * GI, (HugePagePool(1048576, 2, 2),)) for i in range(2)))
    m = Manager(StaticPolicy(machine, {0: {"memory": GI}}), KubeletStateStore(state_dir))
    m.start()
    res = {"cpu": Quantity.from_int(1), "memory": Quantity.from_int(2 * GI, Format.BINARY_SI)}
    m.allocate(Pod("pod-1", containers=(Container("app", res, dict(res)),)), "app")


def test_verify_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written_state(tmp_path)
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "V1 checkpoint, checksum valid, policy 'Static', 2 NUMA nodes, 1 containers in 1 pods"
        in out
    )
    assert out.strip().endswith("OK")


def test_show_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written_state(tmp_path)
    assert main(["state", "show", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "policy: Static" in out
    assert any(line.split()[:3] == ["0", "memory", "8Gi"] for line in out.splitlines())
    assert any(line.split() == ["pod-1", "app", "memory", "0", "2Gi"] for line in out.splitlines())
    assert main(["state", "show", "--state-dir", str(tmp_path), "--json"]) == 0
    assert '"policyName": "Static"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("fixture", "fragment"),
    [
        ("mm_docs_en_4142013182.json", "checkpoint is corrupted"),
        ("mm_v1_valid_4215593881.json", "numberOfAssignments 0 != 1 blocks"),
    ],
)
def test_verify_reports_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str, fragment: str
) -> None:
    shutil.copy(data_path("kubelet-checkpoints", fixture), tmp_path / STATE_FILE)
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert fragment in out
    assert "fix: drain the node" in out


def test_verify_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == 1
    assert "cannot read" in capsys.readouterr().err
