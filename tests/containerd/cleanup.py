"""What a private containerd leaves outside its own directory, and how it is removed.

An instance's directory (``base``) records its owner (the pid and start time of the test
process that made it) and the pod cgroups made for it, so its remains can be found and
removed by a later process too (:func:`reap_stale`) if the owner died without cleaning
up. Outside ``base`` an instance leaves: the shims (daemonized; they name ``base`` in their
``-address`` argument), pre-launched NRI plugins and other processes started with a path
under ``base``, the containers' processes (found in their cgroups), the rootfs and shm
mounts under ``base/state``, the shims' sockets in ``/run/containerd/s`` (named by the
sha256 of ``<address>/<namespace>/<id>``, and recorded in each bundle), any
``/run/containerd/{fifo,runc}`` entry named after one of its containers, the containers'
cgroups (each bundle's ``cgroupsPath``) and the pod cgroups, in every hierarchy.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from numamem.testing.daemon import TMPDIR_VARIABLE
from tests import tmproot
from tests.containerd import cgroups
from tests.containerd.config import Layout

RUN_CONTAINERD = Path("/run/containerd")
NAMESPACE = "k8s.io"
TMP_PREFIX = "ctd"
"""An instance's directory is ``<root>/ctd*`` (:func:`numamem.testing.daemon.short_tmpdir`),
its root ``$NUMAMEM_TEST_TMPDIR`` or ``/tmp`` (:func:`instance_roots`)."""


def argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _start_time(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): with the pid, a process's identity."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def mounts_under(base: Path) -> list[Path]:
    """Mount points at or below ``base``, deepest first."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ").replace("\\011", "\t")
        if point == str(base) or point.startswith(f"{base}/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: -len(p.parts))


_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def unmount(path: Path) -> None:
    if _libc.umount2(str(path).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount2({path}, MNT_DETACH): {os.strerror(err)}")


@dataclass
class Footprint:
    """What an instance had outside its directory, taken before its cleanup."""

    pids: set[int] = field(default_factory=set)
    sockets: set[Path] = field(default_factory=set)
    run_entries: set[Path] = field(default_factory=set)
    cgroups: set[str] = field(default_factory=set)


class Remains:
    """The traces of the instance under ``base``: recording, finding and removing them."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.layout = Layout(base)

    @property
    def _owner_file(self) -> Path:
        return self.base / "owner"

    @property
    def _cgroups_file(self) -> Path:
        return self.base / "cgroups"

    def claim(self) -> None:
        """Record this process as the owner."""
        self._owner_file.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")

    def orphaned(self) -> bool:
        """True when the owner recorded by :meth:`claim` no longer runs."""
        try:
            pid, started = self._owner_file.read_text().split()
        except (OSError, ValueError):
            return False  # not an instance, or one being made
        return _start_time(int(pid)) != started

    def register_cgroup(self, parent: str) -> None:
        """Record a pod cgroup made for the instance (removed by :meth:`cleanup`)."""
        with self._cgroups_file.open("a") as f:
            f.write(parent + "\n")

    def cgroup_parents(self) -> set[str]:
        try:
            return set(self._cgroups_file.read_text().split())
        except OSError:
            return set()

    def own_pids(self) -> set[int]:
        """Processes naming a path under ``base``: containerd (``--config``), its shims
        (``-address``), pre-launched NRI plugins and any other process started so."""
        base = str(self.base)
        return {
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit()
            and int(p.name) != os.getpid()
            and any(a == base or a.startswith(f"{base}/") for a in argv(int(p.name)))
        }

    def _ids(self) -> set[str]:
        ids: set[str] = set()
        for sub in (
            f"io.containerd.runtime.v2.task/{NAMESPACE}",
            "io.containerd.grpc.v1.cri/containers",
            "io.containerd.grpc.v1.cri/sandboxes",
        ):
            with contextlib.suppress(OSError):
                ids |= {p.name for p in (self.layout.state / sub).iterdir()}
        return ids

    def footprint(self) -> Footprint:
        fp = Footprint(pids=self.own_pids(), cgroups=self.cgroup_parents())
        bundles = self.layout.state / "io.containerd.runtime.v2.task" / NAMESPACE
        for cid in self._ids():
            digest = hashlib.sha256(f"{self.layout.address}/{NAMESPACE}/{cid}".encode())
            fp.sockets.add(RUN_CONTAINERD / "s" / digest.hexdigest())
            bundle = bundles / cid
            for name in ("bootstrap.json", "address"):  # 2.x, 1.7
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    text = (bundle / name).read_text()
                    addr = json.loads(text)["address"] if name.endswith(".json") else text
                    fp.sockets.add(Path(addr.strip().removeprefix("unix://")))
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                fp.cgroups.add(
                    json.loads((bundle / "config.json").read_text())["linux"]["cgroupsPath"]
                )
            with contextlib.suppress(OSError, ValueError):
                fp.pids.add(int((bundle / "init.pid").read_text()))
            fp.run_entries |= set((RUN_CONTAINERD / "runc").glob(f"*/{cid}"))
            fp.run_entries |= {f.parent for f in (RUN_CONTAINERD / "fifo").glob(f"*/{cid}-*")}
        for rel in fp.cgroups:
            fp.pids |= cgroups.procs(rel)
        return fp

    def cleanup(self, fp: Footprint | None = None) -> list[str]:
        """Kill, unmount and remove all of the instance (``fp``: its footprint, taken now if
        None) and its directory; what is still there afterwards (empty when all went)."""
        fp = fp or self.footprint()
        cgroups.kill(self.own_pids() | fp.pids)
        for rel in fp.cgroups:
            cgroups.kill(cgroups.procs(rel))
        for point in mounts_under(self.base):
            with contextlib.suppress(OSError):
                unmount(point)
        for path in fp.sockets | fp.run_entries:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        for rel in sorted(fp.cgroups, key=lambda r: -len(r)):
            cgroups.remove(rel)
        if not mounts_under(self.base):
            shutil.rmtree(self.base, ignore_errors=True)
        return self.leftovers(fp)

    def leftovers(self, fp: Footprint) -> list[str]:
        """What of ``fp`` and of the instance's directory still exists, one line each."""
        pids = {p for p in fp.pids | self.own_pids() if cgroups.alive(p)}
        found = [f"process {pid}: {' '.join(argv(pid))}" for pid in sorted(pids)]
        found += [f"mount {p}" for p in mounts_under(self.base)]
        found += [f"file {p}" for p in sorted(fp.sockets | fp.run_entries) if os.path.lexists(p)]
        found += [f"cgroup {p}" for rel in sorted(fp.cgroups) for p in cgroups.existing(rel)]
        if self.base.exists():
            found.append(f"dir {self.base}")
        return found


def instance_roots(shm: Path = tmproot.SHM) -> list[Path]:
    """Where instances of this and of earlier runs may be: ``/tmp``, this run's
    ``$NUMAMEM_TEST_TMPDIR``, and every run directory in /dev/shm (a killed run's stays there,
    tests/tmproot.py)."""
    roots = [Path("/tmp"), *tmproot.run_dirs(shm)]
    if os.environ.get(TMPDIR_VARIABLE):
        roots.append(Path(os.environ[TMPDIR_VARIABLE]))
    return list(dict.fromkeys(roots))


def reap_stale(roots: Iterable[Path] | None = None) -> list[str]:
    """Clean up the instances under ``roots`` (:func:`instance_roots` when None) whose owner
    died without doing it (a killed test process); a line per instance reaped, with what
    could not be removed."""
    reaped = []
    bases = (
        b
        for root in (instance_roots() if roots is None else roots)
        for b in root.glob(f"{TMP_PREFIX}*")
    )
    for base in sorted(bases):
        remains = Remains(base)
        if base.is_dir() and remains.orphaned():
            left = remains.cleanup()
            reaped.append(f"{base}: reaped" + (f", left {left}" if left else ""))
    return reaped
