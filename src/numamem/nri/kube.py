"""What the runtime tells of a Kubernetes pod and container, in the kubelet's terms. Pure.

The CRI (and NRI after it) carries what the kubelet computed for the runtime, not the pod
spec. From it:

* **identity**: the sandbox's uid, name and namespace (the kubelet's
  ``io.kubernetes.pod.*`` labels when a field is empty);
* **QoS class**: the pod's cgroup parent, which the kubelet names after the class
  (:func:`qos_from_cgroup_parent`: cgroupfs ``kubepods[/burstable|/besteffort]/pod<uid>``,
  systemd ``kubepods[-burstable|-besteffort]-pod<uid_with_underscores>.slice``, under any
  ``--cgroup-root``: the kubelet names a systemd cgroup by joining every part of its name,
  the root's parts first, with dashes (``ToSystemd``), so root ``/kubelet`` gives
  ``kubelet-kubepods-pod<uid>.slice``). A kubelet with ``cgroupsPerQOS: false`` makes no pod
  cgroups (the parent is its cgroup root): such pods are an unknown layout, left alone;
* **requests**: the container's *limits* (:func:`container_limits`), which equal its requests
  in a Guaranteed pod, the only class the memory manager pins: memory from
  ``memory.limit``, hugepages from ``hugepage_limits`` (the kubelet lists every size the
  node has, 0 for those not asked), CPU from the CFS quota over its period or, where the
  kubelet sets no quota (``cpuCFSQuota: false``; ``cpu_quota = -1`` for the static CPU
  manager's exclusive CPUs under ``DisableCPUQuotaWithExclusiveCPUs``), from ``cpu.shares``
  (the inverse of the kubelet's ``MilliCPUToShares``: ``shares * 1000 / 1024``, rounded up).
  The cgroup parent establishes the QoS class; the CPU value only completes the request
  (the memory manager pins memory and hugepages).

What cannot be used raises :class:`~numamem.errors.UnusableInputError` naming the field, the
value and what was expected; the plugin logs it once and leaves the container alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from numamem.errors import UnusableInputError, quote
from numamem.nriapi import api_pb2 as api

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
ANNOTATION_RESTART_COUNT = "io.kubernetes.container.restartCount"

# Problem kinds (stable identifiers: logs, counters and tests match on them).
NO_POD_UID = "no_pod_uid"
UNKNOWN_CGROUP_LAYOUT = "unknown_cgroup_layout"
CGROUP_UID_MISMATCH = "cgroup_uid_mismatch"
NO_LIMITS = "no_limits"
BAD_HUGEPAGE_SIZE = "bad_hugepage_size"

SHARES_PER_CPU = 1024
"""The kubelet's ``sharesPerCPU`` (``MilliCPUToShares``: ``milli * 1024 / 1000``, at least 2)."""

_UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "PB": 1 << 50}
_PAGE_SIZE = re.compile(r"([1-9][0-9]{0,5})(KB|MB|GB|TB|PB)")
_CGROUPFS = re.compile(r"(?:.*/)?kubepods(?:/(burstable|besteffort))?/pod([0-9A-Za-z_.-]+)")
_SYSTEMD = re.compile(
    r"(?:[0-9A-Za-z_.:]+-)*kubepods(?:-(burstable|besteffort))?-pod([0-9A-Za-z_]+)\.slice"
)
_CLASS = {None: GUARANTEED, "burstable": BURSTABLE, "besteffort": BEST_EFFORT}


@dataclass(frozen=True)
class PodIdentity:
    """Who a sandbox is to the kubelet."""

    uid: str
    name: str
    namespace: str
    sandbox_id: str

    def describe(self) -> str:
        """``namespace/name (uid)`` for messages."""
        who = quote(f"{self.namespace}/{self.name}", style="bare")
        return f"{who} (uid {quote(self.uid, style='bare')})"


def pod_identity(sandbox: api.PodSandbox) -> PodIdentity:
    """The sandbox's pod; ``UnusableInputError`` (:data:`NO_POD_UID`) without a uid."""
    labels = sandbox.labels
    uid = sandbox_uid(sandbox)
    if not uid:
        raise UnusableInputError(
            NO_POD_UID,
            f"pod sandbox {quote(sandbox.id)} ({quote(sandbox.name)}) has no uid and no "
            f"{LABEL_POD_UID} label: not a pod the kubelet made",
        )
    return PodIdentity(
        uid=uid,
        name=sandbox.name or labels.get(LABEL_POD_NAME, ""),
        namespace=sandbox.namespace or labels.get(LABEL_POD_NAMESPACE, ""),
        sandbox_id=sandbox.id,
    )


def sandbox_uid(sandbox: api.PodSandbox) -> str:
    """The sandbox's pod uid, or its kubelet label's ("" when neither)."""
    return sandbox.uid or sandbox.labels.get(LABEL_POD_UID, "")


def describe_sandbox(sandbox: api.PodSandbox) -> str:
    """``namespace/name (uid)`` of a sandbox for messages, from what it carries."""
    try:
        return pod_identity(sandbox).describe()
    except UnusableInputError:
        return f"sandbox {quote(sandbox.id)} ({quote(sandbox.name)})"


def qos_from_cgroup_parent(parent: str, uid: str) -> str:
    """The QoS class the kubelet's cgroup parent ``parent`` names for pod ``uid``.

    ``UnusableInputError``: :data:`UNKNOWN_CGROUP_LAYOUT` for a parent that is not a
    kubelet pod cgroup of either driver, :data:`CGROUP_UID_MISMATCH` when it names another pod.
    """
    path = parent.rstrip("/")
    last = path.rsplit("/", 1)[-1]
    match = _SYSTEMD.fullmatch(last)
    if match is not None:
        qos, named = match.group(1), match.group(2).replace("_", "-")
    else:
        match = _CGROUPFS.fullmatch(path)
        if match is None:
            raise UnusableInputError(
                UNKNOWN_CGROUP_LAYOUT,
                f"linux.cgroup_parent {quote(parent)} is not a kubelet pod cgroup (cgroupfs "
                "kubepods[/burstable|/besteffort]/pod<uid>, systemd "
                "[<root>-]kubepods[-burstable|-besteffort]-pod<uid>.slice): its QoS class is "
                "unknown",
            )
        qos, named = match.group(1), match.group(2)
    if named != uid:
        raise UnusableInputError(
            CGROUP_UID_MISMATCH,
            f"linux.cgroup_parent {quote(parent)} names pod {quote(named)}, not the sandbox's "
            f"uid {quote(uid)}",
        )
    return _CLASS[qos]


def hugepage_resource(page_size: str) -> str:
    """The Kubernetes resource of a CRI hugepage size: "2MB" -> "hugepages-2Mi", "1GB" ->
    "hugepages-1Gi" (the sizes are binary, as libcontainer names them)."""
    match = _PAGE_SIZE.fullmatch(page_size)
    if match is None:
        raise UnusableInputError(
            BAD_HUGEPAGE_SIZE,
            f"hugepage_limits page_size {quote(page_size)} is not a size such as 2MB or 1GB",
        )
    size = int(match.group(1)) * _UNITS[match.group(2)]
    for unit, factor in (("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20)):
        if size % factor == 0:
            return f"hugepages-{size // factor}{unit}"
    return f"hugepages-{size // 1024}Ki"


@dataclass(frozen=True)
class Limits:
    """A container's limits as the runtime got them: CPU in millicores (None: neither a CFS
    quota nor CPU shares),
    memory in bytes (None: no limit), hugepages by resource name (only those above 0)."""

    cpu_milli: int | None
    memory: int | None
    hugepages: tuple[tuple[str, int], ...] = ()

    @property
    def guaranteed_shape(self) -> bool:
        """Whether they can be a Guaranteed container's: a CPU and a memory limit."""
        return self.cpu_milli is not None and self.memory is not None

    def updated_by(self, update: Limits) -> Limits:
        """These limits after an update that gave ``update``: a field the update leaves unset
        (or 0) is unchanged, as the runtime applies it (a partial update such as the kubelet
        CPU manager's, which sets only ``cpuset.cpus``, changes no limit)."""
        pages = dict(self.hugepages)
        pages.update(update.hugepages)
        return Limits(
            update.cpu_milli if update.cpu_milli is not None else self.cpu_milli,
            update.memory if update.memory is not None else self.memory,
            tuple(sorted(pages.items())),
        )

    def memory_resources(self) -> dict[str, int]:
        """What the memory manager pins: memory and hugepages, bytes."""
        out = dict(self.hugepages)
        if self.memory is not None:
            out["memory"] = self.memory
        return out

    def resources(self) -> dict[str, str]:
        """As Kubernetes quantities (requests equal limits): ``{"cpu": "500m", ...}``."""
        out = {name: str(size) for name, size in self.hugepages}
        if self.cpu_milli is not None:
            out["cpu"] = f"{self.cpu_milli}m"
        if self.memory is not None:
            out["memory"] = str(self.memory)
        return out

    def describe(self) -> str:
        """``cpu 500m, memory 64Mi, hugepages-2Mi 4Mi`` for messages."""
        parts = [] if self.cpu_milli is None else [f"cpu {self.cpu_milli}m"]
        parts += [
            f"{name} {_bytes(size)}" for name, size in sorted(self.memory_resources().items())
        ]
        return ", ".join(parts) or "no limits"


def limits_of(resources: api.LinuxResources) -> Limits:
    """The limits in ``resources`` (a container's, or an update's new ones)."""
    cpu: int | None = None
    given = resources.cpu  # an unset wrapper reads 0: only values above 0 count
    quota, period, shares = given.quota.value, given.period.value, given.shares.value
    if quota > 0 and period > 0:
        # The kubelet's quota is milli * period / 1000 (at least 1000 us): the ceiling
        # gives the limit back (or the smallest one that yields this quota).
        cpu = math.ceil(quota * 1000 / period)
    elif shares > 0:
        # No CFS quota: the kubelet's shares are milli * 1024 / 1000 (at least 2); the
        # ceiling of the inverse is the smallest request that yields them.
        cpu = max(1, math.ceil(shares * 1000 / SHARES_PER_CPU))
    memory: int | None = resources.memory.limit.value or None
    if memory is not None and memory < 0:
        memory = None
    pages: dict[str, int] = {}
    for entry in resources.hugepage_limits:
        if entry.limit > 0:
            name = hugepage_resource(entry.page_size)
            pages[name] = pages.get(name, 0) + entry.limit
    return Limits(cpu, memory, tuple(sorted(pages.items())))


def container_limits(container: api.Container) -> Limits:
    """The container's limits; ``UnusableInputError`` (:data:`BAD_HUGEPAGE_SIZE`) for a page
    size that is not one."""
    return limits_of(container.linux.resources)


def check_guaranteed(limits: Limits, container: str) -> None:
    """``UnusableInputError`` (:data:`NO_LIMITS`) when a container of a pod the cgroup parent
    calls Guaranteed lacks a CPU or memory limit (the runtime's view contradicts itself)."""
    if not limits.guaranteed_shape:
        raise UnusableInputError(
            NO_LIMITS,
            f"container {quote(container)} is in a Guaranteed pod's cgroup but has "
            f"{limits.describe()} (linux.resources: a memory limit and a CPU quota or shares "
            "expected)",
        )


def restart_count(container: api.Container) -> int | None:
    """The kubelet's restart count of the container's name (its
    ``io.kubernetes.container.restartCount`` annotation: earlier instances of the name in the
    pod); None without one (not a container the kubelet made) or for one that is not a count."""
    text = container.annotations.get(ANNOTATION_RESTART_COUNT)
    if text is None or not text.isdigit():
        return None
    return int(text)


def mems_string(nodes: Iterable[int]) -> str:
    """A ``cpuset.mems`` value as the kubelet writes it: the sorted nodes joined by commas."""
    return ",".join(str(n) for n in sorted(set(nodes)))


def parse_mems(text: str) -> frozenset[int] | None:
    """The nodes of a cpuset string ("0-2,4"); None for "" (not set) or one that does not parse."""
    if not text.strip():
        return None
    out: set[int] = set()
    try:
        for part in text.split(","):
            low, dash, high = part.strip().partition("-")
            out.update(range(int(low), int(high if dash else low) + 1))
    except ValueError:
        return None
    return frozenset(out)


def _bytes(size: int) -> str:
    for unit, factor in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)
