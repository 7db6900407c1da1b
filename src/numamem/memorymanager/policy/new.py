"""Which policy a configuration names: the kubelet ``NewManager``'s policy selection."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numamem.config.model import FeatureGates, ReservedMemory
from numamem.errors import ConfigError, quote
from numamem.memorymanager.policy.interface import Policy
from numamem.memorymanager.policy.none import NonePolicy
from numamem.memorymanager.policy.options import StaticOptions
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.memorymanager.state.reserved import get_system_reserved_memory
from numamem.quantity import Quantity
from numamem.topology import Machine


def new_policy(
    name: str,
    machine: Machine,
    node_allocatable: Mapping[str, Quantity],
    reserved_memory: Sequence[ReservedMemory],
    numa_nodes: Sequence[int] | None = None,
    options: StaticOptions | None = None,
    gates: FeatureGates | None = None,
) -> Policy:
    """``NewManager``'s policy selection: ``None`` or ``Static`` (case-sensitive).

    ``numa_nodes`` limits the Static policy's hints and allocations (the CPU nodes, under
    ``restrict-to-cpu-numa-nodes``); None is every node.
    """
    if name == NonePolicy.name:
        return NonePolicy(gates)
    if name == StaticPolicy.name:
        reserved = get_system_reserved_memory(machine, node_allocatable, reserved_memory)
        return StaticPolicy(machine, reserved, numa_nodes, options, gates)
    if name == "BestEffort":
        raise ConfigError(f'policy {quote(name, style="go")} is not available for platform "linux"')
    raise ConfigError(f"unknown policy: {quote(name, style='go')}")
