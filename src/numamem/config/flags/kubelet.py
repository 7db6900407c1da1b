"""The kubelet's memory-manager and topology-manager settings, by the kubelet's flag names
(and the ``KubeletConfiguration`` YAML keys ``--config`` reads): policies and their options,
reservations, eviction thresholds, feature gates.

Part of :data:`numamem.config.flags.table.FLAGS`, in its order (``--help`` and
docs/configuration.md list them so).
"""

from __future__ import annotations

from numamem.config.flags.spec import Flag
from numamem.config.model import (
    DEFAULT_EVICTION_HARD,
    MEMORY_MANAGER_POLICIES,
    TOPOLOGY_MANAGER_POLICIES,
    TOPOLOGY_MANAGER_SCOPES,
)

KUBELET: tuple[Flag, ...] = (
    Flag(
        "--memory-manager-policy",
        "memory_manager_policy",
        "memory manager policy (kubelet names, case-sensitive)",
        "None",
        yaml_key="memoryManagerPolicy",
        choices=MEMORY_MANAGER_POLICIES,
    ),
    Flag(
        "--memory-manager-policy-options",
        "memory_manager_policy_options",
        "Static policy options: 'memory-drift-tolerance=fit|off|auto|<quantity>' (KEP-6232; "
        "fit, numamem's default, restarts on a changed machine as long as every stored block "
        "still fits), 'hugepages-availability-verification=true' (KEP-5759)",
        "none",
        yaml_key="memoryManagerPolicyOptions",
        metavar="LIST",
    ),
    Flag(
        "--reserved-memory",
        "reserved_memory",
        "per-NUMA reservations, kubelet syntax '0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=2Gi' "
        "(repeatable)",
        "none",
        yaml_key="reservedMemory",
        kind="list",
        metavar="SPEC",
    ),
    Flag(
        "--system-reserved",
        "system_reserved",
        "resources reserved for the system, 'memory=1Gi,...'",
        "none",
        yaml_key="systemReserved",
        metavar="LIST",
    ),
    Flag(
        "--kube-reserved",
        "kube_reserved",
        "resources reserved for Kubernetes, 'memory=1Gi,...'",
        "none",
        yaml_key="kubeReserved",
        metavar="LIST",
    ),
    Flag(
        "--eviction-hard",
        "eviction_hard",
        "hard eviction thresholds, kubelet syntax 'memory.available<100Mi,...' (replaces the "
        "default; 'memory.available<0%' disables that signal, as in the kubelet)",
        DEFAULT_EVICTION_HARD,
        yaml_key="evictionHard",
        metavar="LIST",
    ),
    Flag(
        "--feature-gates",
        "feature_gates",
        "kubelet feature gates, kubelet syntax 'PodLevelResources=true,PodLevelResourceManagers=true' "
        "(both off by default; both on: the memory manager allocates pods that set pod-level "
        "resources, KEP-5526, and writes memory_manager_state as V3, as kubelet 1.37 does); a "
        "gate set here overrides the file's",
        "none",
        yaml_key="featureGates",
        kind="list",
        metavar="LIST",
    ),
    Flag(
        "--topology-manager-policy",
        "topology_manager_policy",
        "topology manager policy",
        "none",
        yaml_key="topologyManagerPolicy",
        choices=TOPOLOGY_MANAGER_POLICIES,
    ),
    Flag(
        "--topology-manager-scope",
        "topology_manager_scope",
        "topology manager scope",
        "container",
        yaml_key="topologyManagerScope",
        choices=TOPOLOGY_MANAGER_SCOPES,
    ),
    Flag(
        "--topology-manager-policy-options",
        "topology_manager_policy_options",
        "'prefer-closest-numa-nodes=true,max-allowable-numa-nodes=16'",
        "none",
        yaml_key="topologyManagerPolicyOptions",
        metavar="LIST",
    ),
)
