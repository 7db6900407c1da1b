"""The flags that say where numamem works on the host: its socket and state directory, the
roots it reads (sysfs, cgroups, procfs), and writing ``cpuset.mems`` under the cgroup root.

Part of :data:`numamem.config.flags.table.FLAGS`, in its order (``--help`` and
docs/configuration.md list them so).
"""

from __future__ import annotations

from numamem.config.flags.spec import Flag
from numamem.config.model import DEFAULT_SOCKET, DEFAULT_STATE_DIR, STATE_COMMITS

HOST: tuple[Flag, ...] = (
    Flag(
        "--socket",
        "socket",
        "unix socket to serve on (directory created 0750, socket 0660)",
        DEFAULT_SOCKET,
        metavar="PATH",
    ),
    Flag(
        "--state-dir",
        "state_dir",
        "checkpoints: memory_manager_state (kubelet-compatible), numamem_containers and "
        "numamem_pod_names (container ids, pod names), numamem_state_journal (with "
        "--state-commit=journal), sys_advisor_state and its journal (metacache); created 0700",
        DEFAULT_STATE_DIR,
        metavar="DIR",
    ),
    Flag(
        "--state-commit",
        "state_commit",
        "how the memory manager makes a change durable: replace (memory_manager_state and "
        "numamem_containers replaced on every change, as the kubelet keeps its file) or "
        "journal (one record appended and fsynced to numamem_state_journal, folded into "
        "those files at 1 MiB, at every graceful stop and when a replace-mode start finds "
        "it; one fsync per change instead of three: for the NRI plugin's container-creation path; "
        "offline tools read the journal too: docs/state-files.md in the numamem source)",
        "replace",
        choices=STATE_COMMITS,
    ),
    Flag(
        "--sysfs-root",
        "sysfs_root",
        "root that replaces /sys for topology discovery",
        "/sys",
        metavar="DIR",
    ),
    Flag(
        "--cgroup-root",
        "cgroup_root",
        "root of the cgroup hierarchy for container metrics",
        "/sys/fs/cgroup",
        metavar="DIR",
    ),
    Flag(
        "--enforce-cpuset-mems",
        "enforce_cpuset_mems",
        "each collector round, write a pinned container's assigned NUMA nodes to its cgroup's "
        "cpuset.mems when the kernel enforces other nodes (never a node outside the assignment; "
        "v1: sets cpuset.memory_migrate to 1 first, so its pages move too; v2: not while the "
        "parent cgroup lacks an assigned node; backs off when another agent keeps undoing it: "
        "docs/residency.md in the numamem source); needs write access to --cgroup-root. For node agents that cannot "
        "apply cpuset.mems through the CRI",
        "false",
        kind="bool",
    ),
    Flag(
        "--proc-root",
        "proc_root",
        "procfs root; iomem there gives memory-drift-tolerance=auto its bound",
        "/proc",
        metavar="DIR",
    ),
)
