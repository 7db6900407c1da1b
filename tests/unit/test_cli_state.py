"""``numamem state show`` and ``numamem state verify`` offline on a state dir."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from numamem.checkpoint.mmstore import STATE_FILE, KubeletStateStore
from numamem.cli.main import main
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.pod import Container, Pod
from numamem.quantity import Format, Quantity
from numamem.testing.sysfs import HP_1G, FakeNode, write_sysfs
from numamem.topology import HugePagePool, Machine, NUMANode
from tests.daemon import data_path

GI = 1024**3


def written_state(state_dir: Path, *, journal: bool = False) -> None:
    """pod-1 allocated on the machine of :func:`machine_flags`, in ``state_dir`` (``journal``:
    with ``--state-commit=journal``, and no graceful stop: the pod is only in the journal)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    machine = Machine(tuple(NUMANode(i, 8 * GI, (HugePagePool(1048576, 2, 2),)) for i in range(2)))
    store = KubeletStateStore(state_dir, journal=journal)
    m = Manager(StaticPolicy(machine, {0: {"memory": GI}}), store)
    m.start()
    res = {"cpu": Quantity.from_int(1), "memory": Quantity.from_int(2 * GI, Format.BINARY_SI)}
    m.allocate(Pod("pod-1", containers=(Container("app", res, dict(res)),)), "app")


def machine_flags(root: Path, memory_kb: int = 8 * 1024 * 1024, *extra: str) -> list[str]:
    """A fake sysfs tree of the machine ``written_state`` used (or a changed one), and the
    ``numamem serve`` flags of its configuration."""
    nodes = [FakeNode(i, memory_kb, str(i), {HP_1G: (2, 2)}) for i in range(2)]
    write_sysfs(root / "sys", nodes)
    return [
        "--sysfs-root",
        str(root / "sys"),
        "--memory-manager-policy=Static",
        "--reserved-memory=0:memory=1Gi",
        "--system-reserved=memory=924Mi",
        "--proc-root",
        str(root / "proc"),  # no iomem: auto has no bound, whatever this host's kernel
        *extra,
    ]


def test_verify_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written_state(tmp_path / "state")
    flags = machine_flags(tmp_path)
    assert main(["state", "verify", "--state-dir", str(tmp_path / "state"), *flags]) == 0
    out = capsys.readouterr().out
    assert (
        "V1 checkpoint, checksum valid, policy 'Static', 2 NUMA nodes, 1 container in 1 pod" in out
    )
    assert f"matches this machine and configuration ({tmp_path / 'sys'}, policy Static)" in out
    assert out.strip().endswith("OK")


def test_verify_checks_this_machine_and_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trial of the issue: node memory grew. verify says what serve would do, with the
    same flags: re-baseline under the default, the full refusal under off."""
    state = tmp_path / "state"
    written_state(state)
    grown = machine_flags(tmp_path, 8 * 1024 * 1024 + 640 * 1024)
    assert main(["state", "verify", "--state-dir", str(state), *grown]) == 0
    out = capsys.readouterr().out
    assert "accepted with memory-drift-tolerance=fit" in out
    assert "  node 0 memory TotalMemSize: stored 8Gi (8589934592), now 8.62Gi (9261023232)" in out
    off = [*grown, "--memory-manager-policy-options", "memory-drift-tolerance=off"]
    assert main(["state", "verify", "--state-dir", str(state), *off]) == 1
    out = capsys.readouterr().out
    assert "[memorymanager] the expected machine state is different from the real one" in out
    assert "containers with blocks there: pod-1/app" in out
    assert "memory-drift-tolerance=640Mi or fit accepts this" in out
    assert main(["state", "verify", "--state-dir", str(state), *grown[:2]]) == 1  # policy None
    assert 'configured policy "None" differs from state checkpoint policy "Static"' in (
        capsys.readouterr().out
    )


def test_diff_shows_stored_and_recomputed_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    written_state(state)
    grown = machine_flags(tmp_path, 8 * 1024 * 1024 + 640 * 1024)
    # As diff(1): exit 1 when they differ, with a one-line verdict (issue 26: exit 0, none).
    assert main(["state", "diff", "--state-dir", str(state), *grown]) == 1
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    assert ["0", "memory", "TotalMemSize", "8Gi", "8.62Gi", "*"] in rows
    assert ["1", "memory", "TotalMemSize", "8Gi", "8.62Gi", "*"] in rows
    assert ["0", "memory", "Reserved", "2Gi", "2Gi"] in rows
    assert ["0", "hugepages-1Gi", "TotalMemSize", "2Gi", "2Gi"] in rows
    assert out.splitlines()[-1].startswith("6 fields differ on 2 nodes (0, 1): ")
    same = machine_flags(tmp_path)
    assert main(["state", "diff", "--state-dir", str(state), *same]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "no differences: the stored state is what this machine and configuration give"
    )


def is_snake_case(data: object) -> bool:
    """Every key of every mapping in ``data`` is snake_case."""
    if isinstance(data, dict):
        return all(
            re.fullmatch(r"[a-z][a-z0-9_]*", k) and is_snake_case(v) for k, v in data.items()
        )
    if isinstance(data, list):
        return all(is_snake_case(v) for v in data)
    return True


@pytest.mark.parametrize("where", ["after", "before"])
def test_verify_and_diff_print_json_wherever_json_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """`state verify/diff --json` were usage errors and `state --json diff` printed a table."""
    state = tmp_path / "state"
    written_state(state)
    grown = machine_flags(tmp_path, 8 * 1024 * 1024 + 640 * 1024)
    for action, code in (("verify", 0), ("diff", 1)):
        argv = ["state", action, "--json"] if where == "after" else ["state", "--json", action]
        assert main([*argv, "--state-dir", str(state), *grown]) == code
        data = json.loads(capsys.readouterr().out)
        assert is_snake_case(data), data
        if action == "verify":
            assert data["ok"] is True and data["containers"] == 1
            assert data["machine"]["result"] == "rebaselined"
            assert data["machine"]["tolerance"] == "fit"
        else:
            assert data["differs"] is True
            [total] = [
                r for r in data["rows"] if (r["node"], r["field"]) == (0, "TotalMemSize")
                and r["resource"] == "memory"
            ]  # fmt: skip
            assert (total["stored"], total["now"], total["differs"]) == (8 * GI, 9261023232, True)
    assert main(["state", "show", "--json", "--state-dir", str(state)]) == 0
    assert "policyName" in json.loads(capsys.readouterr().out)  # the kubelet file, as it is


def test_show_names_the_corrupt_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(
        data_path("kubelet-checkpoints", "mm_docs_en_4142013182.json"), tmp_path / STATE_FILE
    )
    assert main(["state", "show", "--state-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"numamem: {tmp_path / STATE_FILE}: checkpoint is corrupted\n"


@pytest.mark.parametrize(
    ("argv", "listed", "not_listed"),
    [
        (
            ["state", "verify"],
            ["--state-dir", "--sysfs-root", "--reserved-memory", "--config", "--json"],
            ["--socket", "--workers", "--health-port", "--metric-interval"],
        ),
        (
            ["state", "diff"],
            ["--state-dir", "--memory-manager-policy", "--json"],
            ["--socket", "--workers", "--health-port"],
        ),
        (
            ["plan-reservations"],
            ["--sysfs-root", "--system-reserved", "--eviction-hard", "--spread"],
            ["--socket", "--state-dir", "--workers", "--health-port", "--reserved-memory"],
        ),
    ],
)
def test_offline_commands_list_only_the_flags_they_read(
    capsys: pytest.CaptureFixture[str], argv: list[str], listed: list[str], not_listed: list[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    options = {
        line.split()[0].rstrip(",")
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("  -")
    }
    assert set(listed) <= options
    assert not set(not_listed) & options


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


def test_state_names_pods_by_namespace_and_name_where_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26: `numamem state` named pods by uid although their names were recorded."""
    from numamem.testing.daemon import short_tmpdir
    from numamem.testing.server import serve_in_process
    from tests.unit.test_cli import GUARANTEED_POD

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(GUARANTEED_POD)
    root = short_tmpdir()
    try:
        with serve_in_process(root=root, podresources_socket=str(root / "pr.sock")) as server:
            sock = ["--socket", server.socket]
            assert main(["admit", "-f", str(manifest), *sock]) == 0
            capsys.readouterr()
            assert main(["state", *sock]) == 0
            rows = [line.split() for line in capsys.readouterr().out.splitlines()]
            assert ["shop/web", "(u-1)", "app", "memory", "0", "1Gi"] in rows
            entry = server.client.get_state().entries["u-1"]
            assert (entry.namespace, entry.name) == ("shop", "web")
            state_dir = server.state_dir
            assert main(["state", "show", "--state-dir", str(state_dir)]) == 0
            rows = [line.split() for line in capsys.readouterr().out.splitlines()]
            assert ["shop/web", "(u-1)", "app", "memory", "0", "1Gi"] in rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_verify_reports_the_pod_names_file_and_its_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from numamem.checkpoint.namesfile import NAMES_FILE, encode_names
    from numamem.checkpoint.records import frame

    state = tmp_path / "state"
    written_state(state)
    names = encode_names({"pod-1": ("shop", "web-0"), "gone": ("shop", "old")})
    (state / NAMES_FILE).write_bytes(names + b"0000002")  # a torn last record
    flags = machine_flags(tmp_path)
    assert main(["state", "verify", "--state-dir", str(state), *flags]) == 0
    out = capsys.readouterr().out
    assert "numamem_pod_names: 1 pod name of pods with state, 1 inert, a torn last record of 7 bytes" in out  # fmt: skip
    (state / NAMES_FILE).write_bytes(names + frame(b"[1]") + frame(b'["a","b","c"]'))
    assert main(["state", "verify", "--state-dir", str(state), *flags]) == 1
    assert "record 3 is not [uid, namespace, name]" in capsys.readouterr().out
