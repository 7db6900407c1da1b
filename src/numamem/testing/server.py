"""The real numamem servicers in-process on a temporary unix socket, on a fake machine.

For client developers (the counterpart of the kubelet's ``NewFakeManager``):
no root, no ``/sys``, no daemon install. ::

    from numamem.testing.server import serve_in_process

    with serve_in_process() as server:
        resp = server.client.admit(pod)

or, with pytest, ``pytest_plugins = ["numamem.testing.fixtures"]`` and the
``numamem_server`` fixture. The server is the daemon's own bootstrap
(:class:`numamem.api.server.Daemon`) with the production components; only the
machine is fake (a sysfs tree written under the temporary directory) and the
state lives in that directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from numamem.api.app import build_components
from numamem.api.server import Daemon
from numamem.client import NumamemClient
from numamem.config.model import Config
from numamem.config.syntax import (
    parse_eviction_hard,
    parse_reserved_memory,
    parse_reserved_resources,
)
from numamem.testing.daemon import short_tmpdir
from numamem.testing.sysfs import FakeNode, standard_nodes, write_sysfs

_Component = TypeVar("_Component")


def daemon_component(daemon: Daemon, kind: type[_Component]) -> _Component:
    """The one component of type ``kind`` the started ``daemon`` serves: the live object,
    not a copy. Raises :class:`AssertionError` naming ``kind`` when it has none or several."""
    found = [c for c in daemon._components if isinstance(c, kind)]
    if len(found) != 1:
        served = ", ".join(type(c).__name__ for c in daemon._components) or "none"
        raise AssertionError(
            f"the daemon has {len(found)} components of type {kind.__name__}, not 1 "
            f"(its components: {served})"
        )
    return found[0]


@dataclass
class InProcessServer:
    root: Path
    socket: str
    config: Config
    daemon: Daemon
    client: NumamemClient

    @property
    def state_dir(self) -> Path:
        return Path(self.config.state_dir)

    def component(self, kind: type[_Component]) -> _Component:
        """The daemon's one component of type ``kind`` (see :func:`daemon_component`)."""
        return daemon_component(self.daemon, kind)


def default_config(root: Path, sysfs: Path, **overrides: Any) -> Config:
    """Static policy, 1Gi reserved on node 0 (924Mi system-reserved + the 100Mi eviction threshold)."""
    cfg = Config(
        socket=str(root / "numamem.sock"),
        state_dir=str(root / "state"),
        sysfs_root=str(sysfs),
        cgroup_root=str(root / "cgroup"),
        proc_root=str(root / "proc"),
        memory_manager_policy="Static",
        reserved_memory=parse_reserved_memory("0:memory=1Gi", "testing"),
        system_reserved=parse_reserved_resources("memory=924Mi", "testing"),
        eviction_hard=parse_eviction_hard("memory.available<100Mi", "testing"),
        shutdown_grace_seconds=1.0,
        workers=8,
    )
    return replace(cfg, **overrides)


@contextmanager
def serve_in_process(
    nodes: Sequence[FakeNode] | None = None, root: Path | None = None, **config: Any
) -> Iterator[InProcessServer]:
    """Start the servicers on ``nodes`` (default: 2 standard nodes); stop them on exit.

    Keyword arguments override :class:`~numamem.config.model.Config` fields. The
    temporary directory is removed on exit unless ``root`` was given.
    """
    owned = root is None
    base = short_tmpdir() if root is None else root
    base.chmod(0o700)
    sysfs = write_sysfs(base / "sys", list(nodes) if nodes is not None else standard_nodes(2))
    cfg = default_config(base, sysfs, **config)
    daemon = Daemon(cfg, build_components, set_umask=False)
    try:
        daemon.start()
        with NumamemClient(cfg.socket, timeout=10) as client:
            yield InProcessServer(base, cfg.socket, cfg, daemon, client)
    finally:
        daemon.shutdown()
        if owned:
            shutil.rmtree(base, ignore_errors=True)
