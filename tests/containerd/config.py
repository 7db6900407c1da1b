"""containerd configuration files for a private test instance: 2.x (``version = 3``) and 1.7 (``version = 2``).

Everything the instance writes is under its own directory (:class:`Layout`): root,
state, the gRPC and ttrpc sockets, the NRI socket, plugin dirs, runc's state (a private
runc ``Root``), the CNI dirs (empty: pods use the host network) and the ``opt`` plugin's
dir (``/opt/containerd`` by default). NRI is enabled (1.7 has it off by default); CRI pods
need ``restrict_oom_score_adj = true`` when the sandbox has no CAP_SYS_RESOURCE; cgroups use
the cgroupfs driver (``SystemdCgroup = false``), as the harness's pods name cgroupfs parents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    """The paths of one private containerd under ``base`` (short: unix sockets allow 107 bytes)."""

    base: Path

    @property
    def config(self) -> Path:
        return self.base / "config.toml"

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def address(self) -> Path:
        """The gRPC socket: the CRI and containerd's own API (``ctr -a``)."""
        return self.base / "c.sock"

    @property
    def ttrpc_address(self) -> Path:
        return self.base / "c.sock.ttrpc"

    @property
    def nri_socket(self) -> Path:
        return self.base / "nri.sock"

    @property
    def plugin_path(self) -> Path:
        """Pre-launched NRI plugins: executables named ``IDX-NAME``."""
        return self.base / "nri-plugins"

    @property
    def plugin_config_path(self) -> Path:
        return self.base / "nri-conf"

    @property
    def runc_root(self) -> Path:
        return self.base / "runc"

    @property
    def cni(self) -> Path:
        return self.base / "cni"

    @property
    def opt(self) -> Path:
        return self.base / "opt"

    @property
    def tmp(self) -> Path:
        """containerd's TMPDIR (its temporary mounts land here, not in /tmp)."""
        return self.base / "tmp"

    @property
    def logs(self) -> Path:
        """The pods' log directories (the kubelet's /var/log/pods)."""
        return self.base / "pods"

    @property
    def log(self) -> Path:
        """containerd's own stdout and stderr."""
        return self.base / "containerd.log"

    def dirs(self) -> list[Path]:
        return [
            self.root,
            self.state,
            self.plugin_path,
            self.plugin_config_path,
            self.runc_root,
            self.cni,
            self.opt,
            self.tmp,
            self.logs,
        ]


def _q(value: object) -> str:
    """A TOML basic string or boolean (JSON's escapes are TOML's for these values)."""
    return json.dumps(value)


def render(
    major: int,
    layout: Layout,
    *,
    runc: Path,
    sandbox_image: str,
    request_timeout: str = "2s",
    registration_timeout: str = "5s",
) -> str:
    """The config.toml of containerd ``major`` (1 for 1.7, 2 for 2.x) for ``layout``."""
    nri = (
        f"disable = false\n"
        f"socket_path = {_q(str(layout.nri_socket))}\n"
        f"plugin_path = {_q(str(layout.plugin_path))}\n"
        f"plugin_config_path = {_q(str(layout.plugin_config_path))}\n"
        f"plugin_registration_timeout = {_q(registration_timeout)}\n"
        f"plugin_request_timeout = {_q(request_timeout)}\n"
    )
    runc_options = (
        f"BinaryName = {_q(str(runc))}\nRoot = {_q(str(layout.runc_root))}\nSystemdCgroup = false\n"
    )
    cni = f"bin_dir = {_q(str(layout.cni))}\nconf_dir = {_q(str(layout.cni))}\n"
    head = (
        f"root = {_q(str(layout.root))}\n"
        f"state = {_q(str(layout.state))}\n"
        f"[grpc]\naddress = {_q(str(layout.address))}\n"
        f"[ttrpc]\naddress = {_q(str(layout.ttrpc_address))}\n"
    )
    if major >= 2:
        rt = "plugins.'io.containerd.cri.v1.runtime'"
        return (
            "version = 3\n"
            + head
            + f"[plugins.'io.containerd.internal.v1.opt']\npath = {_q(str(layout.opt))}\n"
            + f"[plugins.'io.containerd.nri.v1.nri']\n{nri}"
            + "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
            + f"sandbox = {_q(sandbox_image)}\n"
            + f"[{rt}]\nrestrict_oom_score_adj = true\n"
            + f"[{rt}.cni]\n{cni}"
            + f'[{rt}.containerd]\ndefault_runtime_name = "runc"\n'
            + f'[{rt}.containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
            + f"[{rt}.containerd.runtimes.runc.options]\n{runc_options}"
        )
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return (
        "version = 2\n"
        + head
        + f'[plugins."io.containerd.internal.v1.opt"]\npath = {_q(str(layout.opt))}\n'
        + f'[plugins."io.containerd.nri.v1.nri"]\n{nri}'
        + f"[{cri}]\nsandbox_image = {_q(sandbox_image)}\nrestrict_oom_score_adj = true\n"
        + f"[{cri}.cni]\n{cni}"
        + f'[{cri}.containerd]\ndefault_runtime_name = "runc"\n'
        + f'[{cri}.containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
        + f"[{cri}.containerd.runtimes.runc.options]\n{runc_options}"
    )
