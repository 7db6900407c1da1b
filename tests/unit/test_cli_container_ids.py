"""``numamem admit --container-id NAME=ID`` (issue 38): a container admitted by the CLI is
recorded with its runtime id, so residency measures its cgroup; before, its id
``<uid>/<name>`` named no cgroup and residency could never measure it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from numamem.cli.main import main
from numamem.testing.cgroups import SYSTEMD, V2, CgroupValues, write_container
from numamem.testing.server import InProcessServer
from numamem.v1 import memorymanager_pb2 as mm
from tests.unit.test_residency_service import SPLIT, collector_round, serve

RES = {"cpu": "1", "memory": "1Gi"}
MANIFEST = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"uid": "p1", "namespace": "shop", "name": "web"},
    "spec": {
        "containers": [
            {"name": "app", "resources": {"requests": RES, "limits": RES}},
            {"name": "log", "resources": {"requests": RES, "limits": RES}},
        ]
    },
}


def test_a_given_id_is_recorded_and_residency_measures_it(
    short_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_container(short_root / "cgroup", V2, SYSTEMD, "guaranteed", "p1", "aaa", CgroupValues(numa=SPLIT, mems="0"))  # fmt: skip
    manifest = short_root / "pod.yaml"
    manifest.write_text(yaml.safe_dump(MANIFEST))
    with serve(short_root) as server:  # type: ignore[attr-defined]
        sock = ["--socket", server.socket]
        argv = ["admit", "-f", str(manifest), "--container-id", "app=containerd://aaa", *sock]
        assert main([*argv, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["container_ids"] == [
            "containerd://aaa",
            "p1/log",
        ]
        collector_round(server)
        rows = {r.container_name: r for r in server.client.get_residency("p1")}
        assert rows["app"].status == mm.RESIDENCY_MEASURED
        assert rows["app"].container_id == "containerd://aaa"
        assert rows["app"].total_bytes > 0
        assert rows["log"].status == mm.RESIDENCY_NO_CGROUP  # p1/log names no cgroup
        assert main(["release", "containerd://aaa", *sock]) == 0
        assert server.client.get_memory("p1", "app") == []


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--container-id", "nope=containerd://x"], "--container-id 'nope'=...: no such container in the pod (containers: app, log)"),
        (["--container-id", "app=a", "--container-id", "app=b"], "--container-id 'app'=... is given twice"),
        (["--container-id", "app=a", "--container-id", "log=a"], "--container-id ...='a' names two containers"),
        (["--container-id", "app=a", "--no-start"], "--container-id records started containers; --no-start records none"),
        (["--container-id", "app"], "argument --container-id: 'app': expected NAME=ID"),
        (["--container-id", "=x"], "expected NAME=ID"),
    ],
    ids=["unknown", "name-twice", "id-twice", "no-start", "no-equals", "no-name"],
)  # fmt: skip
def test_bad_ids_are_usage_errors_and_admit_nothing(
    numamem_server: InProcessServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    fragment: str,
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(MANIFEST))
    with pytest.raises(SystemExit) as exit_info:
        main(["admit", "-f", str(manifest), *extra, "--socket", numamem_server.socket])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: numamem admit") and fragment in err
    assert numamem_server.client.get_state().entries == {}
