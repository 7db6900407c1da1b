"""Pod manifests (cli/podfile.py, cli/podschema.py) after the review of issue 38: YAML merge
keys read as YAML defines them; ``--validate=strict|warn|ignore`` as kubectl names them, with
the fields of a newer Kubernetes named as such; messages of bounded length; and bounded work
per manifest byte (aliases, nesting, pods and containers per file), each refusal naming its
bound."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from numamem.cli import podfile, podschema
from numamem.cli.main import main
from numamem.cli.podfile import PodFileError, load_pods
from numamem.testing.server import InProcessServer
from tests.unit.test_cli_podfile import KUBECTL_GET_POD

GUARANTEED = "{requests: {memory: 1Gi, cpu: '1'}, limits: {memory: 1Gi, cpu: '1'}}"


def write(tmp_path: Path, text: str, name: str = "pod.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def with_spec(field: str, value: str) -> str:
    """KUBECTL_GET_POD with ``spec.<field>: <value>`` added."""
    return KUBECTL_GET_POD.replace("\nspec:\n", f"\nspec:\n  {field}: {value}\n", 1)


# --- YAML merge keys ---


def test_merge_keys_are_read_as_yaml_defines_them(tmp_path: Path) -> None:
    """``<<: *base`` was refused as "not valid YAML" (the strict constructor built every key
    node itself, the merge key's too)."""
    path = write(
        tmp_path,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, uid: u1}\nspec:\n  containers:\n"
        f"  - &base {{name: a, image: x, resources: {GUARANTEED}}}\n"
        "  - <<: *base\n    name: b\n",
    )
    [pod] = load_pods(path)
    assert [c.name for c in pod.containers] == ["a", "b"]  # b's own name overrides a's
    assert dict(pod.containers[1].limits) == {"memory": "1Gi", "cpu": "1"}


def test_a_field_given_twice_beside_a_merge_key_is_still_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "kind: Pod\nmetadata: {uid: u}\nspec:\n  containers:\n  - &base {name: a}\n"
        "  - <<: *base\n    name: b\n    name: c\n",
    )
    with pytest.raises(PodFileError, match=r"line 8: duplicate field 'name'"):
        load_pods(path)


# --- the fields of a newer Kubernetes, and --validate ---


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("schedulingGroup", "{podGroupName: training-worker-0}"),  # 1.36 (GenericWorkload)
        ("workloadRef", "{name: w, podGroup: workers}"),  # 1.35, replaced in 1.36
        ("evictionResponders", "[]"),  # 1.37
    ],
)
def test_the_fields_of_recent_kubernetes_releases_are_known(
    tmp_path: Path, field: str, value: str
) -> None:
    [pod] = load_pods(write(tmp_path, with_spec(field, value)))
    assert pod.containers[0].limits["memory"] == "2Gi"


def test_a_field_unknown_and_near_no_known_one_says_which_kubernetes_numamem_knows(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, with_spec("quantumEntanglement", "{}"))
    with pytest.raises(PodFileError) as err:
        load_pods(path)
    assert str(err.value) == (
        f"{path}: spec.quantumEntanglement: unknown field of a PodSpec; numamem knows the "
        f"fields of Kubernetes {podschema.KUBERNETES_VERSION}: if this one is from a newer "
        "Kubernetes, pass --validate=warn"
    )


TYPOS = (
    with_spec("quantumEntanglement", "{}")
    .replace('    resources:\n      limits: {cpu: "2"', '    resource:\n      limits: {cpu: "2"')
    .replace("  qosClass: Guaranteed", "  qosClass: Guaranteed\n  qosClass: Guaranteed")
)
"""Three unknown or repeated fields: a newer field, a typo (the resources it names are then
not read), and a field given twice."""


def test_warn_reads_the_manifest_and_warns_once_for_each_field(tmp_path: Path) -> None:
    path = write(tmp_path, TYPOS)
    warnings: list[str] = []
    [pod] = load_pods(path, "warn", warnings.append)
    assert pod.uid == "5b1f2e8c-6a0d-4c53-8f0e-2d9a7c1b3e44"
    assert dict(pod.containers[0].limits) == {}  # `resource:` is not `resources:`
    line = TYPOS.splitlines().index("  qosClass: Guaranteed") + 2  # the second one
    assert sorted(warnings) == sorted(
        [
            f"{path}: line {line}: duplicate field 'qosClass' (YAML keeps only the last one)",
            f"{path}: spec.quantumEntanglement: unknown field of a PodSpec",
            f"{path}: spec.containers[0].resource: unknown field of a Container; did you mean "
            "'resources'?",
        ]
    )


def test_ignore_reads_the_manifest_silently(tmp_path: Path) -> None:
    warnings: list[str] = []
    [pod] = load_pods(write(tmp_path, TYPOS), "ignore", warnings.append)
    assert pod.qos_class == "Guaranteed"
    assert warnings == []


def test_warn_still_refuses_what_cannot_be_read(tmp_path: Path) -> None:
    """--validate is about unknown fields: a kind, a shape or a quantity numamem cannot read
    is refused in every mode."""
    path = write(tmp_path, "kind: Pod\nmetadata: {uid: u}\nspec: {containers: {name: a}}\n")
    for mode in podschema.VALIDATIONS:
        with pytest.raises(PodFileError, match=r"spec\.containers: expected a list of Containers"):
            load_pods(path, mode, lambda _: None)


@pytest.mark.parametrize("command", ["admit", "hints", "explain"])
def test_every_command_that_reads_a_manifest_takes_validate(
    numamem_server: InProcessServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    path = write(tmp_path, with_spec("quantumEntanglement", "{}"))
    socket = ["--socket", numamem_server.socket]
    assert main([command, "-f", path, *socket]) == 1  # strict, the default
    assert "pass --validate=warn" in capsys.readouterr().err
    assert main([command, "-f", path, "--validate=warn", *socket]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == (
        f"numamem: warning: {path}: spec.quantumEntanglement: unknown field of a PodSpec"
    )
    assert main([command, "-f", path, "--validate", "ignore", *socket]) == 0
    assert "warning" not in capsys.readouterr().err


def test_resize_and_sync_take_validate_and_a_bad_value_is_a_usage_error(
    numamem_server: InProcessServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, with_spec("quantumEntanglement", "{}"))
    socket = ["--socket", numamem_server.socket]
    assert main(["sync", "-f", path, "--validate=ignore", *socket]) == 0
    assert capsys.readouterr().err == ""
    # Read (with its warning), then refused by the daemon: nothing is pinned to resize.
    assert main(["resize", "-f", path, "--container", "app", "--validate=warn", *socket]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"numamem: warning: {path}: spec.quantumEntanglement: unknown field of a PodSpec",
        "numamem: nothing resized: the memory manager holds no memory for it (not admitted, "
        "released, or not pinned: `numamem explain -f FILE` says why)",
    ]
    with pytest.raises(SystemExit) as exited:
        main(["admit", "-f", path, "--validate=lenient", *socket])
    assert exited.value.code == 2
    assert "'lenient': expected strict, warn or ignore" in capsys.readouterr().err


# --- bounded messages and bounded work ---


def test_an_unknown_fields_message_is_bounded(tmp_path: Path) -> None:
    """A 100 KB unknown key gave a 100 KB error line; it is quoted with the project's bound."""
    path = write(tmp_path, f"kind: Pod\nmetadata: {{uid: u}}\nspec:\n  ? {'x' * 100_000}\n  : 1\n")
    with pytest.raises(PodFileError) as err:
        load_pods(path)
    message = str(err.value)
    assert len(message) < 500, len(message)
    assert "... (100000 characters): unknown field of a PodSpec" in message


def aliased(pods: int, containers: int) -> str:
    container = f"{{name: c, image: i, resources: {GUARANTEED}}}"
    listed = "[&c " + container + ", " + ", ".join(["*c"] * (containers - 1)) + "]"
    pod = "&p {metadata: {name: p, uid: u}, spec: {containers: " + listed + "}}"
    items = "[" + pod + ", " + ", ".join(["*p"] * (pods - 1)) + "]"
    return "apiVersion: v1\nkind: List\nitems: " + items + "\n"


def test_aliases_that_multiply_the_work_are_refused_naming_the_bound(tmp_path: Path) -> None:
    """2,587 bytes of aliases built 90,000 containers (16 KB: 4 million, 95 s, 2.7 GB)."""
    path = write(tmp_path, aliased(300, 300))
    with pytest.raises(PodFileError) as err:
        load_pods(path)
    assert str(err.value).startswith(
        f"{path}: more than 100000 values (MAX_VALUES: 100000 or one per byte of the "
        "manifest, the larger) with its aliases expanded, at line "
    )
    assert len(load_pods(write(tmp_path, aliased(3, 3)))) == 3  # aliases within the bound


@pytest.mark.parametrize(
    "text", ["[" * 5_000 + "]" * 5_000, "".join(" " * i + "- \n" for i in range(2_000))]
)
def test_deep_nesting_is_refused_naming_the_bound(tmp_path: Path, text: str) -> None:
    """5,000 nested '[' gave a RecursionError traceback of 3,000 lines."""
    path = write(tmp_path, text)
    with pytest.raises(
        PodFileError, match=r": nested more than 64 deep \(MAX_DEPTH\) at line \d+$"
    ):
        load_pods(path)


def test_a_manifest_longer_than_the_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(podfile, "MAX_MANIFEST_BYTES", 1000)
    path = write(tmp_path, KUBECTL_GET_POD)
    with pytest.raises(PodFileError, match=r": longer than 1000 bytes \(MAX_MANIFEST_BYTES\)$"):
        load_pods(path)


def test_pods_and_containers_per_file_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = yaml.safe_load(KUBECTL_GET_POD)
    listing = {"apiVersion": "v1", "kind": "List", "items": [pod] * 4}
    path = write(tmp_path, yaml.safe_dump(listing))
    monkeypatch.setattr(podfile, "MAX_PODS", 3)
    with pytest.raises(PodFileError, match=r": more than 3 pods \(MAX_PODS\); split the file$"):
        load_pods(path)
    monkeypatch.setattr(podfile, "MAX_PODS", 4)
    monkeypatch.setattr(podfile, "MAX_CONTAINERS", 7)  # two per pod
    with pytest.raises(PodFileError) as err:
        load_pods(path)
    assert str(err.value) == (
        f"{path}: items[3].spec: more than 7 containers in the file (MAX_CONTAINERS); split "
        "the file"
    )
