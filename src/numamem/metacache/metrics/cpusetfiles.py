"""A container's ``cpuset.mems``: the nodes the kernel enforces, read; the assignment, written.

Placement (:mod:`numamem.metacache.metrics.placement`) reads the enforced node list (v1
``cpuset.effective_mems``, or ``cpuset.mems`` on kernels without it, in the cpuset
hierarchy; v2 ``cpuset.mems.effective``), and ``--enforce-cpuset-mems``
(:mod:`numamem.metacache.metrics.cpusetwrite`) may write ``cpuset.mems`` (and, on v1,
``cpuset.memory_migrate``) through :func:`write_mems`, :func:`restore_mems` and
:func:`enable_memory_migrate`, which write nothing unless the directory, symlinks
resolved, is a container's inside ``kubepods`` or ``kubepods.slice`` of the controller
(:func:`write_cgroup_file`). No other file is ever written, nor any file created.
"""

from __future__ import annotations

import os
from pathlib import Path

from numamem.cpuset import format_cpulist
from numamem.errors import PATH_QUOTE_BYTES, CgroupPathError, quote
from numamem.metacache.metrics.cgroup import V2, CgroupDirs, cpuset_controller, read_small
from numamem.metacache.metrics.numastat import parse_mems


def enforced_mems_file(dirs: CgroupDirs) -> Path:
    """The file holding the nodes the kernel enforces for the cgroup."""
    if dirs.mode == V2:
        return dirs.cpuset / "cpuset.mems.effective"
    effective = dirs.cpuset / "cpuset.effective_mems"
    return effective if effective.exists() else dirs.cpuset / "cpuset.mems"


def read_enforced_mems(dirs: CgroupDirs) -> frozenset[int] | None:
    """The enforced nodes, or None when the cgroup has no such file (no cpuset controller)."""
    path = enforced_mems_file(dirs)
    try:
        text = read_small(path)
    except FileNotFoundError:
        return None
    return parse_mems(text, str(path))


_WRITABLE = frozenset({"cpuset.mems", "cpuset.memory_migrate"})
_CONTAINER_TOPS = ("kubepods", "kubepods.slice")


def _real_dir(fd: int, directory: Path) -> str:
    """The real path of the open directory ``fd`` (what it is, not what its name says now)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: the name resolved now (open to a rename in between)
        return os.path.realpath(directory)


def check_container_dir(controller: Path, real: str) -> None:
    """Raise :class:`~numamem.errors.CgroupPathError` unless ``real`` (a resolved directory)
    is a container's (or a pod's) cgroup: at least two levels inside
    ``<controller>/kubepods`` or ``<controller>/kubepods.slice``, the controller resolved."""
    base = Path(os.path.realpath(controller))
    path = Path(real)
    for top in _CONTAINER_TOPS:
        if path.is_relative_to(base / top) and len(path.relative_to(base / top).parts) >= 2:
            return
    raise CgroupPathError(
        f"refusing to write in {quote(real, limit=PATH_QUOTE_BYTES)}: not a container's cgroup "
        f"inside {base}/kubepods or {base}/kubepods.slice (a symlink or a hostile id; check "
        "--cgroup-root and the container's directory)"
    )


def write_cgroup_file(controller: Path, directory: Path, name: str, text: str) -> Path:
    """Write ``text`` to the existing file ``name`` (``cpuset.mems`` or
    ``cpuset.memory_migrate``) of the cgroup ``directory``, in one write; returns the file.

    Before anything is written, the directory, opened (so that it cannot be swapped
    afterwards), must resolve to a container's cgroup inside the controller's
    ``kubepods`` tree (:func:`check_container_dir`); the file is opened without following
    a symlink and never created. An OSError names the file."""
    if name not in _WRITABLE:
        raise ValueError(f"numamem never writes {quote(name)}")
    path = directory / name
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(directory)) from None
    try:
        check_container_dir(controller, _real_dir(dir_fd, directory))
        try:
            fd = os.open(
                name, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(path)) from None
        try:
            os.write(fd, text.encode("ascii"))
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(path)) from None
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
    return path


def enable_memory_migrate(root: Path, dirs: CgroupDirs) -> bool:
    """v1: set ``cpuset.memory_migrate`` to 1 (so a new ``cpuset.mems`` moves the pages the
    tasks already have); True when this call changed it. v2 always migrates."""
    path = dirs.cpuset / "cpuset.memory_migrate"
    if dirs.mode == V2 or not path.exists() or read_small(path).strip() == "1":
        return False
    write_cgroup_file(cpuset_controller(root, dirs.mode), dirs.cpuset, path.name, "1\n")
    return True


def write_mems(root: Path, dirs: CgroupDirs, nodes: frozenset[int]) -> Path:
    """Write ``cpuset.mems`` (exactly ``nodes``, which must not be empty); returns the file."""
    if not nodes:
        raise ValueError("refusing to write an empty cpuset.mems")
    return write_cgroup_file(
        cpuset_controller(root, dirs.mode), dirs.cpuset, "cpuset.mems", format_cpulist(nodes) + "\n"
    )


def restore_mems(root: Path, dirs: CgroupDirs, text: str) -> Path:
    """Write back a ``cpuset.mems`` value read before a write (it may be empty: on v2 that
    means the parent's nodes). It must be a node list; returns the file."""
    nodes = parse_mems(text, str(dirs.cpuset / "cpuset.mems"))
    return write_cgroup_file(
        cpuset_controller(root, dirs.mode),
        dirs.cpuset,
        "cpuset.mems",
        format_cpulist(nodes) + "\n",
    )
