"""deploy/: the manifests parse, carry what an installation needs and agree with the daemon's defaults."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from numamem.config.model import DEFAULT_SOCKET, DEFAULT_STATE_DIR
from tests.deploy_manifests import (
    POD_IP,
    REPO,
    cli_args,
    container_env,
    daemonset_docs,
    deploy_file,
    exec_start_args,
    expand,
    nri_container,
    numamem_container,
    probe_command,
    serve_config,
    systemd_unit,
)


def _under(path: str, mount: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(mount))


# --- the example configuration ------------------------------------------------------


def test_example_config_is_accepted_by_the_daemon() -> None:
    cfg = serve_config([], deploy_file("numamem.yaml"))
    assert cfg.memory_manager_policy == "Static"
    assert cfg.topology_manager_policy == "best-effort"
    # The node-allocatable rule: reservedMemory == systemReserved + kubeReserved + eviction.
    reserved = sum(q.value for r in cfg.reserved_memory for t, q in r.limits if t == "memory")
    system = sum(q.value for t, q in (*cfg.system_reserved, *cfg.kube_reserved) if t == "memory")
    eviction = sum(
        t.quantity.value for t in cfg.eviction_hard if t.signal == "memory.available" and t.quantity
    )
    assert reserved == system + eviction


# --- the DaemonSet ------------------------------------------------------------------------


def test_daemonset_is_a_complete_daemonset() -> None:
    docs = daemonset_docs()
    assert set(docs) == {"ConfigMap", "DaemonSet"}
    ds = docs["DaemonSet"]
    assert ds["apiVersion"] == "apps/v1"
    assert ds["metadata"]["name"] and ds["metadata"]["namespace"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    container = numamem_container(ds)
    assert container["image"]
    assert container["resources"]["requests"].keys() >= {"cpu", "memory"}
    assert "cpu" not in container["resources"].get("limits", {})  # no throttling on admission
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc.get("privileged", False) is False


def test_daemonset_paths_agree_with_the_daemon_and_its_mounts() -> None:
    docs = daemonset_docs()
    ds = docs["DaemonSet"]
    pod_spec = ds["spec"]["template"]["spec"]
    container = numamem_container(ds)
    args = expand(container["args"], container_env(container))
    assert args[0] == "serve"
    config_arg = next(a for a in args if a.startswith("--config="))
    config_path = config_arg.split("=", 1)[1]
    # The embedded configuration is the example file, and the daemon accepts it.
    embedded = docs["ConfigMap"]["data"][PurePosixPath(config_path).name]
    assert yaml.safe_load(embedded) == yaml.safe_load(deploy_file("numamem.yaml").read_text())
    cfg = serve_config(args, deploy_file("numamem.yaml"))
    assert (cfg.socket, cfg.state_dir) == (DEFAULT_SOCKET, DEFAULT_STATE_DIR)

    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec["volumes"]}

    def host_path(mount_path: str) -> str:
        return str(volumes[mounts[mount_path]["name"]]["hostPath"]["path"])

    # Socket and state dirs are the same paths on the host, so node agents find them.
    socket_dir = str(PurePosixPath(cfg.socket).parent)
    assert host_path(socket_dir) == socket_dir
    assert host_path(cfg.state_dir) == cfg.state_dir
    assert not mounts[cfg.state_dir].get("readOnly", False)
    # /sys from the host, read-only; topology and cgroups are read under it.
    [sys_mount] = [m for m in mounts if host_path_or_none(volumes, mounts[m]) == "/sys"]
    assert mounts[sys_mount]["readOnly"] is True
    assert cfg.sysfs_root == sys_mount
    assert _under(cfg.cgroup_root, sys_mount)
    # The config file comes from the ConfigMap.
    config_dir = str(PurePosixPath(config_path).parent)
    assert (
        volumes[mounts[config_dir]["name"]]["configMap"]["name"]
        == (docs["ConfigMap"]["metadata"]["name"])
    )


def host_path_or_none(volumes: dict[str, dict[str, object]], mount: dict[str, object]) -> object:
    host = volumes[str(mount["name"])].get("hostPath")
    return host.get("path") if isinstance(host, dict) else None


def test_daemonset_probes_check_health_over_the_socket_and_the_health_port() -> None:
    """Exec probes run `numamem health` (no grpcurl binary, any architecture); the kubelet's gRPC
    probe reaches --health-port on the pod IP, which the daemon is told to listen on."""
    container = numamem_container(daemonset_docs()["DaemonSet"])
    cfg = serve_config(
        expand(container["args"], container_env(container)), deploy_file("numamem.yaml")
    )
    for probe in ("startupProbe", "livenessProbe"):
        assert probe_command(container, probe) == [
            "numamem",
            "health",
            f"--socket={cfg.socket}",
            "--timeout=2",
        ]
        assert container[probe]["timeoutSeconds"] > 2
    assert container["readinessProbe"]["grpc"]["port"] == cfg.health_port
    assert cfg.health_address == POD_IP and cfg.metrics_address == POD_IP
    ports = {p["containerPort"] for p in container["ports"]}
    assert {cfg.health_port, cfg.metrics_port} <= ports


# --- the systemd unit -------------------------------------------------------------------------


def test_systemd_unit_is_hardened_and_matches_the_daemon_paths() -> None:
    unit = systemd_unit()
    service = unit["Service"]
    argv = exec_start_args(unit)
    assert argv[0].endswith("/numamem") and argv[1] == "serve"
    config_file = argv[argv.index("--config") + 1]
    cfg = serve_config(argv[1:], deploy_file("numamem.yaml"))
    assert (cfg.socket, cfg.state_dir) == (DEFAULT_SOCKET, DEFAULT_STATE_DIR)
    assert str(PurePosixPath(cfg.socket).parent) == "/run/" + service["RuntimeDirectory"]
    assert cfg.state_dir == "/var/lib/" + service["StateDirectory"]
    assert str(PurePosixPath(config_file).parent) == "/etc/" + service["ConfigurationDirectory"]
    assert service["StateDirectoryMode"] == "0700"
    assert service["RuntimeDirectoryMode"] == "0750"
    assert service["ProtectSystem"] == "strict"
    assert set(service["ReadWritePaths"].split()) == {cfg.state_dir, "/run/numamem"}
    assert service["Restart"] == "on-failure"
    # Readiness: the daemon notifies (api/sdnotify.py), so Before=kubelet.service waits for it.
    assert (service["Type"], service["NotifyAccess"]) == ("notify", "main")
    assert unit["Unit"]["Before"] == "kubelet.service"
    assert service["WatchdogSec"].endswith("s")
    assert service["NoNewPrivileges"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert unit["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    """systemd-analyze exits 0 even for unknown keys, so its warnings must be empty too."""
    unit_text = deploy_file("systemd", "numamem.service").read_text()
    numamem = shutil.which("numamem") or str(Path(sys.executable).parent / "numamem")
    unit = tmp_path / "numamem.service"
    unit.write_text(unit_text.replace("/usr/local/bin/numamem", numamem))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if str(unit) in line] == []


# --- the image ---------------------------------------------------------------------------------


def test_the_image_needs_no_grpcurl_and_gets_no_local_state() -> None:
    text = deploy_file("Containerfile").read_text()
    assert "pip install --no-cache-dir /src/numamem " in text  # no [grpcurl]: x86-64 only
    assert 'ENTRYPOINT ["numamem"]' in text
    ignored = (REPO / ".dockerignore").read_text().split()
    for path in (".git", ".venv", ".numamem", "bench/results", "**/__pycache__"):
        assert path in ignored, path


# --- NFD topology-updater reading numamem's podresources API --------------------------------


def test_the_nfd_example_reads_numamems_podresources_socket_state_and_policy(
    tmp_path: Path,
) -> None:
    numamem_docs = daemonset_docs()
    container = numamem_container(numamem_docs["DaemonSet"])
    args = expand(container["args"], container_env(container))
    cfg = serve_config(args, deploy_file("numamem.yaml"))
    assert cfg.podresources_socket is not None and cfg.kubelet_podresources_socket is not None
    numamem_mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(PurePosixPath(cfg.kubelet_podresources_socket).parent) in numamem_mounts

    docs = {
        d["kind"]: d
        for d in yaml.safe_load_all(
            deploy_file("kubernetes", "nfd-topology-updater.yaml").read_text()
        )
    }
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    [updater] = spec["containers"]
    flags = dict(a.lstrip("-").split("=", 1) for a in updater["args"])
    mounts = {m["mountPath"]: m["name"] for m in updater["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}

    def on_host(path: str) -> str:
        """The host path of ``path`` in the updater's container."""
        for mount, name in mounts.items():
            if _under(path, mount) and "hostPath" in volumes[name]:
                rest = PurePosixPath(path).relative_to(mount)
                return str(PurePosixPath(volumes[name]["hostPath"]["path"]) / rest)
        raise AssertionError(f"{path} is not on a host mount")

    assert on_host(flags["podresources-socket"]) == cfg.podresources_socket
    assert on_host(flags["kubelet-state-dir"]) == cfg.state_dir
    # The policy the updater publishes is numamem's: the same KubeletConfiguration numamem
    # reads (numamem accepts the file), with numamem's example settings.
    uri = flags["kubelet-config-uri"]
    assert uri.startswith("file://")
    config_file = PurePosixPath(uri.removeprefix("file://"))
    configmap = volumes[mounts[str(config_file.parent)]]["configMap"]["name"]
    assert docs["ConfigMap"]["metadata"]["name"] == configmap
    kubelet_config = tmp_path / "kubelet-config.yaml"
    kubelet_config.write_text(docs["ConfigMap"]["data"][config_file.name])
    theirs = serve_config(["serve"], kubelet_config)
    ours = serve_config(["serve"], deploy_file("numamem.yaml"))
    for field in (
        "memory_manager_policy",
        "topology_manager_policy",
        "topology_manager_scope",
        "reserved_memory",
        "system_reserved",
        "eviction_hard",
    ):
        assert getattr(theirs, field) == getattr(ours, field), field


def test_systemd_unit_checks_the_configuration_before_each_start() -> None:
    """ExecStartPre= runs `numamem serve --check` with exactly ExecStart's flags (issue 38)."""
    from numamem.cli.main import build_parser

    unit = systemd_unit()
    pre, start = exec_start_args(unit, "ExecStartPre"), exec_start_args(unit)
    assert pre[:3] == [start[0], "serve", "--check"]
    assert pre[3:] == start[2:]
    args = build_parser().parse_args(pre[1:])
    assert args.check is True and args.command == "serve"


# --- the NRI plugin's container -------------------------------------------------------------


def test_the_nri_container_runs_numamem_nri_beside_the_daemon_from_the_same_image() -> None:
    """External mode: the daemon's socket through the socket directory both containers mount
    from the same host path, containerd's NRI socket from the host's /var/run/nri, the
    status socket the probes read in a mounted directory; hardened like the daemon."""
    from numamem.cli.nri import DEFAULT_NRI_SOCKET
    from numamem.nri.plugin import DEFAULT_SOCKET as PLUGIN_DEFAULT_NRI_SOCKET

    ds = daemonset_docs()["DaemonSet"]
    pod_spec = ds["spec"]["template"]["spec"]
    daemon, plugin = numamem_container(ds), nri_container(ds)
    assert plugin["image"] == daemon["image"]
    args = cli_args(plugin["args"])
    assert args.command == "nri"
    assert (args.plugin_name, args.plugin_idx, args.on_reject) == ("numamem", "50", "fail")
    cfg = serve_config(expand(daemon["args"], container_env(daemon)), deploy_file("numamem.yaml"))
    assert args.socket == cfg.socket
    assert args.nri_socket == DEFAULT_NRI_SOCKET == PLUGIN_DEFAULT_NRI_SOCKET

    volumes = {v["name"]: v for v in pod_spec["volumes"]}

    def host_dir(container: dict[str, Any], path: str) -> str:
        """The host directory a path in ``container`` is on (its mount's hostPath)."""
        [mount] = [m for m in container["volumeMounts"] if _under(path, m["mountPath"])]
        assert not mount.get("readOnly", False), mount  # sockets are connected to: writable
        rest = PurePosixPath(path).relative_to(mount["mountPath"])
        return str(PurePosixPath(volumes[mount["name"]]["hostPath"]["path"]) / rest)

    assert host_dir(plugin, args.socket) == host_dir(daemon, cfg.socket) == cfg.socket
    assert host_dir(plugin, args.nri_socket) == DEFAULT_NRI_SOCKET
    nri_dir = next(
        v for v in volumes.values() if v.get("hostPath", {}).get("path") == "/var/run/nri"
    )
    assert nri_dir["hostPath"]["type"] == "DirectoryOrCreate"  # containerd recreates the socket
    assert host_dir(plugin, args.status_socket)  # in a mounted directory: the probes reach it

    assert plugin["resources"]["requests"].keys() >= {"cpu", "memory"}
    assert "cpu" not in plugin["resources"].get("limits", {})  # no throttling of CreateContainer
    sc = plugin["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and sc.get("privileged", False) is False


def test_the_nri_containers_probes_ask_the_plugin_whether_it_is_registered() -> None:
    """`numamem nri-status` on the plugin's --status-socket, as startup and liveness probes;
    the probe command parses as the image's numamem parses it."""
    plugin = nri_container(daemonset_docs()["DaemonSet"])
    status_socket = cli_args(plugin["args"]).status_socket
    for probe in ("startupProbe", "livenessProbe"):
        command = probe_command(plugin, probe)
        assert command[0] == "numamem"
        args = cli_args(command[1:])
        assert args.command == "nri-status"
        assert args.status_socket == status_socket
        assert plugin[probe]["timeoutSeconds"] > args.timeout
    # Until the first registration the startup probe waits longer than containerd takes to
    # start (about 2 s here); then a plugin unregistered for 3 liveness periods is restarted.
    startup = plugin["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60
    assert "readinessProbe" not in plugin  # no Service routes to it


def test_the_image_runs_both_containers_commands() -> None:
    """One image: its entrypoint is numamem, whose parser has the daemon's, the plugin's and
    both probes' commands."""
    from numamem.cli.main import build_parser

    assert 'ENTRYPOINT ["numamem"]' in deploy_file("Containerfile").read_text()
    ds = daemonset_docs()["DaemonSet"]
    commands = {c["args"][0] for c in ds["spec"]["template"]["spec"]["containers"]}
    for c in ds["spec"]["template"]["spec"]["containers"]:
        commands |= {
            probe_command(c, p)[1] for p in ("startupProbe", "livenessProbe") if "exec" in c[p]
        }
    assert commands == {"serve", "nri", "health", "nri-status"}
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert commands <= set(sub.choices)  # type: ignore[arg-type]
