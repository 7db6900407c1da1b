"""``--config /var/lib/kubelet/config.yaml``: the kubelet's own KubeletConfiguration, as it is."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from numamem.config.flags.table import add_serve_arguments
from numamem.config.load import config_from_args
from numamem.config.model import Config
from numamem.errors import ConfigError
from numamem.quantity import parse_quantity
from numamem.testing.server import serve_in_process

KUBELET_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///var/run/containerd/containerd.sock
cpuManagerPolicy: static
cpuManagerReconcilePeriod: 0s
evictionHard:
  memory.available: 100Mi
  nodefs.available: 10%
evictionPressureTransitionPeriod: 0s
featureGates:
  MemoryManager: true
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMinimumGCAge: 0s
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
  verbosity: 0
memoryManagerPolicy: Static
memoryManagerPolicyOptions:
  memory-drift-tolerance: auto
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
reservedMemory:
- numaNode: 0
  limits:
    memory: 1124Mi
reservedSystemCPUs: 0-1
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
systemReserved:
  cpu: 500m
  memory: 1Gi
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
volumeStatsAggPeriod: 0s
"""


def load(path: Path) -> Config:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return config_from_args(parser.parse_args(["--config", str(path)]))


def test_a_real_kubelet_config_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(KUBELET_CONFIG)
    cfg = load(path)
    assert cfg.memory_manager_policy == "Static"
    assert cfg.memory_manager_policy_options == (("memory-drift-tolerance", "auto"),)
    assert cfg.topology_manager_policy == "single-numa-node"
    assert cfg.topology_manager_scope == "pod"
    assert cfg.topology_manager_policy_options == (("prefer-closest-numa-nodes", "true"),)
    assert dict(cfg.system_reserved) == {
        "cpu": parse_quantity("500m"),
        "memory": parse_quantity("1Gi"),
    }
    assert [(r.numa_node, dict(r.limits)) for r in cfg.reserved_memory] == [
        (0, {"memory": parse_quantity("1124Mi")})
    ]
    assert {t.signal for t in cfg.eviction_hard} == {"memory.available", "nodefs.available"}


def test_the_daemon_starts_from_a_kubelet_config(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(KUBELET_CONFIG.replace("single-numa-node", "restricted"))
    cfg = load(path)
    with serve_in_process(
        memory_manager_policy=cfg.memory_manager_policy,
        reserved_memory=cfg.reserved_memory,
        system_reserved=cfg.system_reserved,
        eviction_hard=cfg.eviction_hard,
        topology_manager_policy=cfg.topology_manager_policy,
        topology_manager_policy_options=cfg.topology_manager_policy_options,
        memory_manager_policy_options=cfg.memory_manager_policy_options,
    ) as server:
        assert server.client.get_state().policy_name == "Static"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnotAKubeletField: 1\n",
            "notAKubeletField (in {path}, line 3): unknown field; known fields: ",
        ),
        ("clusterDNS: [10.0.0.1]\n", "clusterDNS (in {path}, line 1): unknown field"),
        ("\n# c\nmemoryManagerPolicy: Stati\n", "memoryManagerPolicy (in {path}, line 3): unknown"),
        (
            "apiVersion: v1\nkind: Pod\n",
            "--config '{path}': kind 'Pod', apiVersion 'v1': numamem reads its own fields, or a "
            "KubeletConfiguration of kubelet.config.k8s.io/v1beta1",
        ),
    ],
)
def test_fields_in_neither_schema_are_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert message.format(path=path) in str(info.value)


def test_ignored_kubelet_fields_are_kept_for_the_log_not_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Loading the configuration runs before logging is configured: it prints nothing (issue
    26: a console-format debug line ignored --log-level/--log-format) and hands the ignored
    fields to `serve`, which lists them at debug level."""
    path = tmp_path / "config.yaml"
    path.write_text(KUBELET_CONFIG)
    cfg = load(path)
    assert {"authentication", "cgroupDriver", "staticPodPath"} <= set(cfg.ignored_kubelet_fields)
    assert "memoryManagerPolicy" not in cfg.ignored_kubelet_fields
    assert capsys.readouterr() == ("", "")
