"""The machine's NUMA topology: an immutable description and its discovery from sysfs.

Nothing outside this package reads ``/sys`` for topology.
"""

from numamem.topology.machine import HugePagePool, Machine, NUMANode, hugepage_resource_name

__all__ = ["HugePagePool", "Machine", "NUMANode", "hugepage_resource_name"]
