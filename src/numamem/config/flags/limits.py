"""The flags of what numamem keeps and how much it accepts: metacache persistence, shared
state and socket directories, and the bound on every input (``--max-*``).

Part of :data:`numamem.config.flags.table.FLAGS`, in its order (``--help`` and
docs/configuration.md list them so).
"""

from __future__ import annotations

from numamem.config.flags.spec import Flag

LIMITS: tuple[Flag, ...] = (
    Flag(
        "--metacache-discard-corrupt-state",
        "metacache_discard_corrupt_state",
        "on a corrupt sys_advisor_state, move it aside and start empty instead of refusing to start",
        "false",
        kind="bool",
    ),
    Flag(
        "--no-metacache-persist",
        "metacache_persist",
        "keep the metacache in memory only (no sys_advisor_state or journal writes)",
        "persist",
        kind="bool",
    ),
    Flag(
        "--metacache-compact-bytes",
        "metacache_compact_bytes",
        "write a new sys_advisor_state snapshot (and empty its journal) once the journal is "
        "larger than this and than the snapshot",
        "262144",
        kind="int",
        metavar="BYTES",
        allowed=(4096, 1073741824),
        unit="bytes",
    ),
    Flag(
        "--allow-shared-dirs",
        "allow_shared_dirs",
        "run even if the state or socket directory is group/world-writable by another user",
        "false",
        kind="bool",
    ),
    Flag(
        "--max-pods",
        "limits.max_pods",
        "maximum pods in the memory manager state",
        "10000",
        kind="int",
        metavar="N",
        allowed=(1, 1000000),
    ),
    Flag(
        "--max-containers-per-pod",
        "limits.max_containers_per_pod",
        "maximum init+app containers in one pod",
        "256",
        kind="int",
        metavar="N",
        allowed=(1, 10000),
    ),
    Flag(
        "--max-metacache-entries",
        "limits.max_metacache_entries",
        "maximum containers+pools+regions in the metacache",
        "100000",
        kind="int",
        metavar="N",
        allowed=(1, 10000000),
    ),
    Flag(
        "--max-metacache-entry-bytes",
        "limits.max_metacache_entry_bytes",
        "maximum JSON bytes of one metacache entry (a container with its labels and "
        "annotations, a pool, a region); Kubernetes allows 256 KiB of annotations",
        "262144",
        kind="int",
        metavar="BYTES",
        allowed=(1024, 64 * 1024 * 1024),
    ),
    Flag(
        "--max-metacache-bytes",
        "limits.max_metacache_bytes",
        "maximum JSON bytes of all metacache entries together (about what the snapshot "
        "holds; memory is a few times more)",
        "268435456",
        kind="int",
        metavar="BYTES",
        allowed=(64 * 1024, 16 * 1024 * 1024 * 1024),
    ),
    Flag(
        "--max-concurrent-rpcs",
        "limits.max_concurrent_rpcs",
        "numamem RPCs running or queued at once; more are RESOURCE_EXHAUSTED at once (health "
        "and reflection are never refused)",
        "128",
        kind="int",
        metavar="N",
        allowed=(1, 100000),
    ),
    Flag(
        "--max-topology-hints",
        "limits.max_topology_hints",
        "hints per resource GetTopologyHints lists before it counts the rest (at least 255, "
        "every mask of 8 nodes; every preferred hint is listed too, up to 65536); admission "
        "always considers every hint",
        "4096",
        kind="int",
        metavar="N",
        allowed=(255, 65536),
    ),
    Flag(
        "--max-message-bytes",
        "limits.max_message_bytes",
        "maximum gRPC message size",
        str(4 * 1024 * 1024),
        kind="int",
        metavar="N",
        allowed=(65536, 2147483647),
        unit="bytes",
    ),
)
