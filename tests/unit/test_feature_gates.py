"""Feature gates as the kubelet spells them: ``--feature-gates Name=bool,...`` and
``featureGates:`` in numamem's YAML or a KubeletConfiguration (PodLevelResources and
PodLevelResourceManagers, both off by default)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from numamem.config.flags.table import add_serve_arguments
from numamem.config.load import config_from_args
from numamem.config.model import Config, FeatureGates
from numamem.errors import ConfigError

KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def parse(argv: list[str]) -> Config:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def test_both_gates_are_off_by_default() -> None:
    assert parse([]).feature_gates == FeatureGates(False, False)


@pytest.mark.parametrize(
    ("flags", "gates"),
    [
        (["PodLevelResources=true,PodLevelResourceManagers=true"], FeatureGates(True, True)),
        (["PodLevelResources=true"], FeatureGates(True, False)),
        (["PodLevelResources=T, PodLevelResourceManagers=1"], FeatureGates(True, True)),
        (["PodLevelResources=true,PodLevelResources=false"], FeatureGates(False, False)),
        # repeated flags accumulate, a later setting wins
        (["PodLevelResources=true", "PodLevelResourceManagers=True"], FeatureGates(True, True)),
        (["PodLevelResources=true,PodLevelResourceManagers=true", "PodLevelResourceManagers=0"],
         FeatureGates(True, False)),
        ([""], FeatureGates(False, False)),
    ],
)  # fmt: skip
def test_feature_gates_flag(flags: list[str], gates: FeatureGates) -> None:
    argv = [arg for value in flags for arg in ("--feature-gates", value)]
    assert parse(argv).feature_gates == gates


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("PodLevelResouces=true",
         "unrecognized feature gate: PodLevelResouces (numamem knows PodLevelResourceManagers, "
         "PodLevelResources)"),
        ("MemoryManager=true", "unrecognized feature gate: MemoryManager"),
        ("PodLevelResources", "malformed pair 'PodLevelResources', expect string=bool"),
        ("PodLevelResources=yes", "invalid value of PodLevelResources=yes: expected true or false"),
        ("=true", "malformed pair '=true'"),
        ("PodLevelResourceManagers=true",
         "PodLevelResourceManagers=true needs PodLevelResources=true"),
    ],
)  # fmt: skip
def test_feature_gates_flag_errors_name_the_value_and_the_fix(value: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(["--feature-gates", value])
    assert fragment in str(info.value)
    assert "--feature-gates" in str(info.value)


def test_numamem_yaml_feature_gates_and_flag_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "numamem.yaml"
    cfg.write_text("featureGates:\n  PodLevelResources: true\n  PodLevelResourceManagers: true\n")
    assert parse(["--config", str(cfg)]).feature_gates == FeatureGates(True, True)
    got = parse(["--config", str(cfg), "--feature-gates", "PodLevelResourceManagers=false"])
    assert got.feature_gates == FeatureGates(True, False)  # a gate set by flag overrides the file's


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("featureGates:\n  Unknown: true\n", "unrecognized feature gate: Unknown"),
        (
            "featureGates:\n  PodLevelResources: 'yes'\n",
            "PodLevelResources: expected true or false",
        ),
    ],
)
def test_numamem_yaml_refuses_unknown_gates_and_non_booleans(
    tmp_path: Path, content: str, fragment: str
) -> None:
    cfg = tmp_path / "numamem.yaml"
    cfg.write_text(content)
    with pytest.raises(ConfigError, match=fragment):
        parse(["--config", str(cfg)])


def test_a_kubelet_configuration_sets_the_gates_and_lists_its_other_gates_as_ignored(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text(
        KUBELET + "memoryManagerPolicy: Static\nfeatureGates:\n  MemoryManager: true\n"
        "  PodLevelResources: true\n  PodLevelResourceManagers: true\n"
    )
    got = parse(["--config", str(cfg)])
    assert got.feature_gates == FeatureGates(True, True)
    assert "featureGates.MemoryManager" in got.ignored_kubelet_fields
