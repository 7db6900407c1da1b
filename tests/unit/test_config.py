"""Configuration: flags, the YAML file, precedence and one-line errors."""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

import pytest

from numamem.config.flags.table import add_serve_arguments, flag_reference
from numamem.config.load import config_from_args
from numamem.config.model import Config
from numamem.config.syntax import parse_eviction_hard, parse_reserved_memory
from numamem.errors import ConfigError


def parse(argv: list[str]) -> Config:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def test_defaults_match_the_contract() -> None:
    cfg = parse([])
    assert cfg.socket == "/run/numamem/numamem.sock"
    assert cfg.state_dir == "/var/lib/numamem"
    assert cfg.sysfs_root == "/sys"
    assert cfg.cgroup_root == "/sys/fs/cgroup"
    assert cfg.memory_manager_policy == "None"
    assert cfg.topology_manager_policy == "none"
    assert cfg.topology_manager_scope == "container"
    assert cfg.health_port is None
    assert (cfg.log_level, cfg.log_format) == ("info", "json")
    [threshold] = cfg.eviction_hard
    assert threshold.signal == "memory.available"
    assert str(threshold.quantity) == "100Mi"


def test_reserved_memory_flag_syntax() -> None:
    entries = parse_reserved_memory(
        "0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi", "--reserved-memory"
    )
    assert [(e.numa_node, [(k, str(q)) for k, q in e.limits]) for e in entries] == [
        (0, [("memory", "1Gi"), ("hugepages-1Gi", "2Gi")]),
        (1, [("memory", "2Gi")]),
    ]
    # Repeated flags concatenate.
    cfg = parse(["--reserved-memory", "0:memory=1Gi", "--reserved-memory", "1:memory=2Gi"])
    assert [e.numa_node for e in cfg.reserved_memory] == [0, 1]


def test_yaml_file_and_flag_precedence(tmp_path: Path) -> None:
    cfg_file = tmp_path / "numamem.yaml"
    cfg_file.write_text(
        "memoryManagerPolicy: Static\n"
        "reservedMemory:\n"
        "  - numaNode: 0\n"
        "    limits: {memory: 1100Mi}\n"
        "systemReserved: {memory: 1Gi, cpu: 500m}\n"
        "evictionHard: {memory.available: 76Mi}\n"
        "topologyManagerPolicy: single-numa-node\n"
        "topologyManagerScope: pod\n"
        "topologyManagerPolicyOptions: {prefer-closest-numa-nodes: 'true'}\n"
    )
    cfg = parse(["--config", str(cfg_file), "--topology-manager-policy", "restricted"])
    assert cfg.memory_manager_policy == "Static"
    assert cfg.reserved_memory[0].numa_node == 0
    assert str(dict(cfg.reserved_memory[0].limits)["memory"]) == "1100Mi"
    assert {k: str(v) for k, v in cfg.system_reserved} == {"memory": "1Gi", "cpu": "500m"}
    assert str(cfg.eviction_hard[0].quantity) == "76Mi"
    assert cfg.topology_manager_policy == "restricted"  # the flag wins over the file
    assert cfg.topology_manager_scope == "pod"
    assert dict(cfg.topology_manager_policy_options) == {"prefer-closest-numa-nodes": "true"}


def test_eviction_percentage() -> None:
    [t] = parse_eviction_hard("memory.available<10%", "--eviction-hard")
    assert t.percentage == Fraction(1, 10)
    assert t.quantity is None
    [t] = parse_eviction_hard("memory.available<0.0%", "--eviction-hard")
    assert t.percentage == 0  # only the exact strings "0%" and "100%" mean "no threshold"


@pytest.mark.parametrize("value", ["0%", "100%"])
def test_zero_and_hundred_percent_disable_a_threshold(tmp_path: Path, value: str) -> None:
    """kubelet's threshold parser returns no threshold for exactly 0% and 100%."""
    cfg = parse(["--eviction-hard", f"memory.available<{value},nodefs.available<10%"])
    assert [t.signal for t in cfg.eviction_hard] == ["nodefs.available"]
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(f'evictionHard: {{memory.available: "{value}"}}\n')
    assert parse(["--config", str(cfg_file)]).eviction_hard == ()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--memory-manager-policy", "static"], 'unknown policy: "static"'),
        (["--topology-manager-policy", "strict"], 'unknown policy: "strict"'),
        (["--topology-manager-scope", "node"], 'unknown scope: "node"'),
        (["--reserved-memory", "0:memory=1Gb"], "'1Gb' is not a valid quantity"),
        (["--reserved-memory", "x:memory=1Gi"], "NUMA node id must be an integer, got 'x'"),
        (["--reserved-memory", "0-memory=1Gi"], "expected numaNodeID:type=quantity"),
        (["--system-reserved", "memory=-1Gi"], "cannot be negative"),
        (["--system-reserved", "gpu=1"], "cannot reserve 'gpu' resource"),
        (["--eviction-hard", "memory.available>1Gi"], "expected signal<value"),
        (["--eviction-hard", "memory.free<1Gi"], "unsupported eviction signal 'memory.free'"),
        (
            ["--eviction-hard", "memory.available<150%"],
            "eviction percentage threshold memory.available must be <= 100%: 150%",
        ),
        (
            ["--eviction-hard", "memory.available<-1%"],
            "eviction percentage threshold memory.available must be >= 0%: -1%",
        ),
        (
            ["--eviction-hard", "memory.available<0"],
            "eviction threshold memory.available must be positive: 0",
        ),
        (["--eviction-hard", "memory.available<1%,memory.available<0%"], "duplicate eviction"),
        (["--health-port", "70000"], "got '70000'; allowed: an integer from 1 to 65535"),
        (["--health-port", "abc"], "got 'abc'; allowed: an integer from 1 to 65535"),
        (["--max-topology-hints", "100"], "got '100'; allowed: an integer from 255 to 65536"),
        (["--shutdown-grace", "-1"], "got '-1'; allowed: a number from 0 to 3600 seconds"),
        (["--metric-interval", "0"], "got '0'; allowed: a number from 0.1 to 86400 seconds"),
        (["--metric-interval", "nan"], "allowed: a number from 0.1 to 86400 seconds"),
        (["--metric-interval", "inf"], "allowed: a number from 0.1 to 86400 seconds"),
        (["--workers", "0"], "got '0'; allowed: an integer from 1 to 1024"),
        (["--metacache-compact-bytes", "10"], "allowed: an integer from 4096 to 1073741824 bytes"),
        (["--max-message-bytes", "1e6"], "allowed: an integer from 65536 to 2147483647 bytes"),
        (["--topology-manager-policy-options", "a=1,a=2"], "duplicate key 'a'"),
    ],
)
def test_flag_errors_name_the_flag_and_value(argv: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(argv)
    message = str(info.value)
    assert argv[0] in message
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("memoryManagerPolicy: [1, 2]\n", "memoryManagerPolicy (in"),
        ("memoryManagerPolcy: Static\n", "memoryManagerPolcy (in"),
        (
            "reservedMemory:\n  - numaNode: -1\n    limits: {memory: 1Gi}\n",
            "numaNode: expected a NUMA node id",
        ),
        (
            "reservedMemory:\n  - numaNode: 0\n    limits: {memory: lots}\n",
            "'lots' is not a valid quantity",
        ),
        ("- just\n- a list\n", "expected a mapping of fields"),
        ("memoryManagerPolicy: 'Static\n", "not valid YAML"),
    ],
)
def test_yaml_errors_name_the_field(tmp_path: Path, content: str, fragment: str) -> None:
    cfg_file = tmp_path / "bad.yaml"
    cfg_file.write_text(content)
    with pytest.raises(ConfigError) as info:
        parse(["--config", str(cfg_file)])
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        parse(["--config", "/nonexistent/numamem.yaml"])


def test_flag_reference_lists_every_flag() -> None:
    names = [row[0].split()[0] for row in flag_reference()]
    assert "--socket" in names
    assert "--reserved-memory" in names
    assert len(names) == len(set(names))


def test_every_numeric_flag_has_a_range_and_its_edges_are_accepted() -> None:
    """Every interval, timeout, count and size flag is bounded (issue 24: --metric-interval 0
    was accepted and busy-looped); the bounds themselves are allowed, one step past is not."""
    from numamem.config.flags.table import FLAGS

    numeric = [f for f in FLAGS if f.kind in ("int", "float")]
    assert len(numeric) >= 13
    for f in numeric:
        assert f.allowed is not None, f.name
        low, high = f.allowed
        for edge in (low, high):
            text = str(int(edge)) if f.kind == "int" else repr(float(edge))
            parse([f.name, text])
        step = 1 if f.kind == "int" else 0.01
        for outside in (low - step, high + step):
            text = str(int(outside)) if f.kind == "int" else repr(float(outside))
            with pytest.raises(ConfigError, match=r"allowed: an? (integer|number) from"):
                parse([f.name, text])
