"""Whether the containerd harness can run on this machine, and its builds, fetched once per
process: one answer for the pytest fixtures (:mod:`tests.containerd.fixtures` skips saying
why) and ``make bench`` (bench/nri.py reports why). Imports no pytest.
"""

from __future__ import annotations

import os

from tests.containerd import cgroups, debs
from tests.containerd.cleanup import reap_stale
from tests.containerd.instance import Distribution, distribution

_DISTS: dict[str, Distribution] = {}
_UNREACHABLE: dict[str, str] = {}
"""A registry that was not reached is not tried again by the same process (each try can
take the probe's whole timeout)."""


def unavailable() -> str | None:
    """Why the harness cannot run here, for an operator (None: it can): not root, or no
    cpuset cgroup controller mounted."""
    if os.geteuid() != 0:
        return f"the containerd harness needs root (euid {os.geteuid()}): it runs containerd, runc and cgroups"
    if cgroups.cpuset_hierarchy() is None:
        return "no cpuset cgroup controller is mounted (v1 or v2): the harness reads containers' cpuset"
    return None


def build(name: str) -> Distribution | str:
    """The build ``name`` (a key of :data:`instance.DISTRIBUTIONS`), fetched once per machine
    (then cached, and kept by this process), or why it cannot be had: :func:`unavailable`'s
    reason, or the Debian registry not reached on a first download (naming the URL tried;
    remembered by this process). Until a build is had, each call first reaps what killed
    processes left behind (:func:`cleanup.reap_stale`). Raises :class:`debs.FetchError` as
    :func:`instance.distribution` does."""
    reason = unavailable()
    if reason:
        return reason
    if not _DISTS:
        reap_stale()
    if name in _UNREACHABLE:
        return _UNREACHABLE[name]
    if name not in _DISTS:
        try:
            _DISTS[name] = distribution(name)
        except debs.RegistryUnreachableError as err:
            _UNREACHABLE[name] = str(err)
            return _UNREACHABLE[name]
    return _DISTS[name]
