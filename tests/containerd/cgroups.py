"""The host's cgroup hierarchies as the kubelet uses them: pod parents, their creation and removal.

The kubelet (cgroupfs driver) creates ``kubepods``, ``kubepods/burstable`` and
``kubepods/besteffort`` at start and ``.../pod<uid>`` before it runs a pod's sandbox,
in every mounted hierarchy; runc then creates each container's cgroup below it. A new
cpuset cgroup on v1 starts with empty ``cpuset.cpus``/``cpuset.mems`` and takes no tasks
until they are set, so each new level copies its parent's (as libcontainer does); on v2
each level enables its parent's controllers in ``cgroup.subtree_control``.

The QoS levels are shared by every test on the machine (pytest-xdist workers): they are
created and, when empty, removed only under :data:`KUBEPODS_LOCK`, and a pod's own level is
created under it too, so no worker removes a level another is about to use.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tests.containerd import debs

QOS_LEVELS = ("kubepods/burstable", "kubepods/besteffort", "kubepods")
"""Shared levels, deepest first (the order they can be removed in)."""


def kubepods_lock() -> Path:
    return debs.cache_dir() / "kubepods.lock"


@dataclass(frozen=True)
class Hierarchy:
    mount: Path
    version: int
    controllers: frozenset[str]


def hierarchies(mountinfo: Path = Path("/proc/self/mountinfo")) -> list[Hierarchy]:
    """Every mounted cgroup hierarchy (v1 named ones such as ``name=systemd`` included)."""
    found = []
    for line in mountinfo.read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _source, options = [*post.split(), "", ""][:3]
        mount = Path(pre.split()[4].replace("\\040", " "))
        if fstype == "cgroup":
            names = {o for o in options.split(",") if o not in {"rw", "ro"} and "=" not in o}
            names |= {o for o in options.split(",") if o.startswith("name=")}
            found.append(Hierarchy(mount, 1, frozenset(names)))
        elif fstype == "cgroup2":
            ctl = mount / "cgroup.controllers"
            names = set(ctl.read_text().split()) if ctl.exists() else set()
            found.append(Hierarchy(mount, 2, frozenset(names)))
    return found


def cpuset_hierarchy() -> Hierarchy | None:
    """The hierarchy holding the cpuset controller (v1's own, or v2's unified), if any."""
    return next((h for h in hierarchies() if "cpuset" in h.controllers), None)


def _new_level(h: Hierarchy, path: Path) -> None:
    try:
        path.mkdir()
    except FileExistsError:
        return
    parent = path.parent
    if h.version == 1 and "cpuset" in h.controllers:
        for name in ("cpuset.cpus", "cpuset.mems"):
            if not (path / name).read_text().strip():
                (path / name).write_text((parent / name).read_text())
    elif h.version == 2 and h.controllers:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        wanted = set((parent / "cgroup.controllers").read_text().split())
        for name in sorted(wanted - enabled):
            with contextlib.suppress(OSError):  # e.g. a threaded subtree refuses some
                (parent / "cgroup.subtree_control").write_text(f"+{name}")


def create(parent: str) -> None:
    """Create the cgroup ``parent`` (e.g. ``/kubepods/burstable/pod<uid>``) level by level in
    every hierarchy, as the kubelet does before it runs a pod; existing levels are kept."""
    rel = Path(parent.strip("/"))
    with debs.locked(kubepods_lock()):
        for h in hierarchies():
            path = h.mount
            for part in rel.parts:
                path = path / part
                _new_level(h, path)


def procs(rel: str) -> set[int]:
    """The pids in cgroup ``rel`` and below it, in any hierarchy."""
    found: set[int] = set()
    for h in hierarchies():
        top = h.mount / rel.strip("/")
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in os.walk(top):
            with contextlib.suppress(OSError):
                found |= {int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split()}
    return found


def kill(pids: set[int], timeout: float = 10.0) -> set[int]:
    """SIGKILL ``pids`` and wait until they are gone; the pids still there after ``timeout``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if alive(p)}
        if left:
            time.sleep(0.02)
    return left


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie is dead; its parent reaps it


def remove(rel: str) -> list[str]:
    """Kill what runs in cgroup ``rel`` and remove it and its children in every hierarchy;
    then the shared QoS levels that are left empty. The cgroups that could not be removed."""
    rel = rel.strip("/")
    kill(procs(rel))
    failed = []
    for h in hierarchies():
        top = h.mount / rel
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            if not _rmdir(Path(dirpath)):
                failed.append(dirpath)
    with debs.locked(kubepods_lock()):
        for h in hierarchies():
            for level in QOS_LEVELS:
                _rmdir(h.mount / level, tries=1)  # kept while another pod is below it
    return failed


def _rmdir(path: Path, tries: int = 50) -> bool:
    """Remove the cgroup ``path`` if it has no child cgroups; retry a moment (``tries`` times
    20 ms) while the kernel still counts a task that just exited. True when it is gone."""
    for attempt in range(tries):
        try:
            if any(p.is_dir() for p in path.iterdir()):
                return False
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as err:
            if err.errno != errno.EBUSY or attempt == tries - 1:
                return False
            time.sleep(0.02)
    return False


def existing(rel: str) -> list[Path]:
    """The hierarchies' directories of cgroup ``rel`` that exist."""
    return [h.mount / rel.strip("/") for h in hierarchies() if (h.mount / rel.strip("/")).is_dir()]
