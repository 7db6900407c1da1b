"""The containerd harness's parts that need neither root nor containerd (tests/containerd)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import threading
import time
import tomllib
from pathlib import Path

import pytest

from numamem.testing.daemon import TMPDIR_VARIABLE, short_tmpdir
from tests.containerd import available, cgroups, debs, images, kubelet
from tests.containerd.cleanup import TMP_PREFIX, Remains, instance_roots, reap_stale
from tests.containerd.config import Layout, render
from tests.containerd.kubelet import ContainerSpec, PodSpec, QOSClass

MiB = 1 << 20


@pytest.mark.parametrize(("major", "nri", "cri"), [
    (1, 'plugins."io.containerd.nri.v1.nri"', 'plugins."io.containerd.grpc.v1.cri"'),
    (2, "plugins.'io.containerd.nri.v1.nri'", "plugins.'io.containerd.cri.v1.runtime'"),
])  # fmt: skip
def test_config_enables_nri_and_keeps_every_path_private(
    tmp_path: Path, major: int, nri: str, cri: str
) -> None:
    layout = Layout(tmp_path)
    text = render(major, layout, runc=Path("/usr/sbin/runc"), sandbox_image="pause:1",
                  request_timeout="3s")  # fmt: skip
    assert nri in text and cri in text
    config = tomllib.loads(text)
    assert config["version"] == (2 if major == 1 else 3)
    plugins = config["plugins"]
    assert plugins["io.containerd.nri.v1.nri"] == {
        "disable": False,
        "socket_path": str(layout.nri_socket),
        "plugin_path": str(layout.plugin_path),
        "plugin_config_path": str(layout.plugin_config_path),
        "plugin_registration_timeout": "5s",
        "plugin_request_timeout": "3s",
    }
    runtime = plugins["io.containerd.grpc.v1.cri" if major == 1 else "io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    options = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert options == {"BinaryName": "/usr/sbin/runc", "Root": str(layout.runc_root),
                       "SystemdCgroup": False}  # fmt: skip
    sandbox = (
        runtime["sandbox_image"]
        if major == 1
        else plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]
    )
    assert sandbox == "pause:1"

    def paths(value: object) -> list[str]:
        if isinstance(value, dict):
            return [p for v in value.values() for p in paths(v)]
        return [value] if isinstance(value, str) and value.startswith("/") else []

    outside = [p for p in paths(config) if not p.startswith(f"{tmp_path}/")]
    assert outside == ["/usr/sbin/runc"]


def _fake_busybox(path: Path) -> Path:
    path.write_text("#!/bin/sh\necho busybox; echo sh; echo sleep; echo cat\n")
    path.chmod(0o755)
    return path


def test_images_are_an_oci_layout_with_two_reproducible_images(tmp_path: Path) -> None:
    busybox = _fake_busybox(tmp_path / "busybox")
    images.build_layout_tar(busybox, tmp_path / "a.tar", "arm64")
    images.build_layout_tar(busybox, tmp_path / "b.tar", "arm64")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    by_name = {m["annotations"]["io.containerd.image.name"]: m for m in index["manifests"]}
    assert sorted(by_name) == sorted([images.SHELL_IMAGE, images.PAUSE_IMAGE])
    blob = lambda d: files["blobs/sha256/" + d["digest"].split(":")[1]]  # noqa: E731
    for name, desc in by_name.items():
        assert desc["platform"] == {"architecture": "arm64", "os": "linux"}
        manifest = json.loads(blob(desc))
        config = json.loads(blob(manifest["config"]))
        assert config["architecture"] == "arm64"
        layer = gzip.decompress(blob(manifest["layers"][0]))
        assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
        with tarfile.open(fileobj=io.BytesIO(layer)) as lt:
            members = {m.name: m for m in lt.getmembers()}
        assert members["bin/busybox"].mode == 0o755
        assert {n: m.linkname for n, m in members.items() if m.issym()} == {
            "bin/sh": "busybox", "bin/sleep": "busybox", "bin/cat": "busybox"}  # fmt: skip
        entry = config["config"].get("Entrypoint")
        assert entry == (images.PAUSE_ENTRYPOINT if name == images.PAUSE_IMAGE else None)


def test_oci_arch_maps_uname_and_names_an_unknown_one() -> None:
    assert images.oci_arch("x86_64") == "amd64"
    assert images.oci_arch("aarch64") == "arm64"
    with pytest.raises(RuntimeError, match="'vax'"):
        images.oci_arch("vax")


def test_machine_archive_reads_deb822_then_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# http://snapshot.example/\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    assert debs.machine_archive(tmp_path) == debs.Archive(
        "http://mirror.example/debian", "/usr/share/keyrings/debian-archive-keyring.gpg"
    )
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n"
    )
    assert debs.machine_archive(tmp_path) == debs.Archive("http://m.example/debian", "/k.gpg")
    (tmp_path / "sources.list").write_text("")
    with pytest.raises(debs.FetchError, match="no Debian archive"):
        debs.machine_archive(tmp_path)


def test_an_unreachable_archive_is_named_in_the_skip_reason() -> None:
    with pytest.raises(debs.RegistryUnreachableError) as err:
        debs._reachable("http://127.0.0.1:9/debian", "trixie")
    assert err.value.url == "http://127.0.0.1:9/debian/dists/trixie/InRelease"
    assert "no Debian registry: http://127.0.0.1:9/debian/dists/trixie/InRelease" in str(err.value)


def _fake_entry(cache: Path, key: str) -> None:
    work = cache / f".work-{key}"
    (work / "root").mkdir(parents=True)
    (work / "manifest.json").write_text(json.dumps({
        "key": key, "package": key, "version": "1", "suite": "s", "url": "u", "sha256": "0"}))  # fmt: skip
    time.sleep(0.05)  # a slow download: a second fetcher must wait for it, not repeat it
    os.rename(work, cache / key)


def test_concurrent_fetches_download_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(debs.CACHE_ENV, str(tmp_path))
    calls: list[list[str]] = []

    def fetch_locked(cache: Path, packages: list[debs.Package]) -> None:
        calls.append([p.key for p in packages])
        for p in packages:
            _fake_entry(cache, p.key)

    monkeypatch.setattr(debs, "_fetch_locked", fetch_locked)
    results: list[dict[str, debs.Unpacked]] = []
    threads = [
        threading.Thread(target=lambda: results.append(debs.fetch(["containerd-2", "busybox"])))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [list(debs.PACKAGES)]  # one fetch, of every missing package
    assert len(results) == 4
    assert all(r["busybox"].root == debs.cache_dir() / "busybox" / "root" for r in results)


def test_a_failed_fetch_leaves_no_entry_and_the_next_one_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(debs.CACHE_ENV, str(tmp_path))

    def half_done(cache: Path, packages: list[debs.Package]) -> None:
        (cache / ".work-killed" / "busybox" / "root").mkdir(parents=True)
        raise debs.FetchError("apt-get download: connection reset")

    monkeypatch.setattr(debs, "_fetch_locked", half_done)
    with pytest.raises(debs.FetchError):
        debs.fetch(["busybox"])
    assert not (debs.cache_dir() / "busybox").exists()
    monkeypatch.setattr(debs, "_fetch_locked", lambda c, ps: [_fake_entry(c, p.key) for p in ps])
    assert debs.fetch(["busybox"])["busybox"].version == "1"
    assert not list(debs.cache_dir().glob(".work-*"))  # the killed builder's scratch is gone


@pytest.mark.parametrize(("containers", "qos", "parent"), [
    ((ContainerSpec.guaranteed("a", 500, 64 * MiB),), QOSClass.GUARANTEED, "/kubepods/podU"),
    ((ContainerSpec("a", cpu_limit=500, memory_limit=64 * MiB),), QOSClass.GUARANTEED, "/kubepods/podU"),
    ((ContainerSpec("a", cpu_request=100),), QOSClass.BURSTABLE, "/kubepods/burstable/podU"),
    ((ContainerSpec.guaranteed("a", 500, 64 * MiB), ContainerSpec("b")), QOSClass.BURSTABLE,
     "/kubepods/burstable/podU"),
    ((ContainerSpec("a"), ContainerSpec("b")), QOSClass.BEST_EFFORT, "/kubepods/besteffort/podU"),
])  # fmt: skip
def test_qos_class_and_cgroup_parent_are_the_kubelets(
    containers: tuple[ContainerSpec, ...], qos: QOSClass, parent: str
) -> None:
    pod = PodSpec("p", containers, uid="U")
    assert (pod.qos(), pod.cgroup_parent()) == (qos, parent)


@pytest.mark.parametrize("qos", list(QOSClass))
def test_a_pod_of_each_class(qos: QOSClass) -> None:
    assert PodSpec.of(qos, "p").qos() is qos


def test_resources_are_computed_as_the_kubelet_computes_them() -> None:
    app = ContainerSpec("app", cpu_request=250, cpu_limit=1500, memory_request=32 * MiB,
                        memory_limit=64 * MiB, hugepage_limits={"2MB": 4 * MiB})  # fmt: skip
    init = ContainerSpec.guaranteed("init", 2000, 16 * MiB)
    pod = PodSpec("p", (app, ContainerSpec("side", cpu_request=5)), init_containers=(init,))
    r = kubelet.container_resources(pod, app)
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period) == (256, 150_000, 100_000)
    assert (r.memory_limit_in_bytes, r.hugepage_limits) == (64 * MiB, {"2MB": 4 * MiB})
    assert 3 <= r.oom_score_adj <= 999
    side = kubelet.container_resources(pod, pod.containers[1])
    assert (side.cpu_shares, side.cpu_quota, side.oom_score_adj) == (5, 0, 999)
    whole = kubelet.pod_resources(pod)  # the init container's CPU is the floor; memory the sum
    assert (whole.cpu_shares, whole.cpu_quota) == (2048, 200_000)
    assert whole.memory_limit_in_bytes == 64 * MiB
    assert kubelet.shares(0) == 2 and kubelet.quota(1) == 1000
    guaranteed = PodSpec("g", (init,))
    assert kubelet.container_resources(guaranteed, init).oom_score_adj == -997
    assert (
        kubelet.container_resources(
            PodSpec("b", (ContainerSpec("x"),)), ContainerSpec("x")
        ).oom_score_adj
        == 1000
    )


def test_hierarchies_are_read_from_mountinfo(tmp_path: Path) -> None:
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
        f"41 31 0:38 / {unified} rw,relatime - cgroup2 cgroup2 rw\n"
    )
    found = {str(h.mount): (h.version, set(h.controllers)) for h in cgroups.hierarchies(mountinfo)}
    assert found == {
        "/sys/fs/cgroup/cpuset": (1, {"cpuset"}),
        "/sys/fs/cgroup/cpu,cpuacct": (1, {"cpu", "cpuacct"}),
        "/sys/fs/cgroup/systemd": (1, {"xattr", "name=systemd"}),
        str(unified): (2, set()),
    }


def test_an_instance_whose_owner_died_is_reaped_and_a_live_ones_is_not(tmp_path: Path) -> None:
    live, dead, making = tmp_path / "ctdlive", tmp_path / "ctddead", tmp_path / "ctdmaking"
    for base in (live, dead, making):
        (base / "state").mkdir(parents=True)
    Remains(live).claim()
    (dead / "owner").write_text("999999999 1\n")  # no such process
    assert not Remains(live).orphaned() and Remains(dead).orphaned()
    assert not Remains(making).orphaned()  # not claimed yet: being made
    assert reap_stale([tmp_path]) == [f"{dead}: reaped"]
    assert live.exists() and making.exists() and not dead.exists()


def test_an_instance_of_a_killed_run_in_dev_shm_is_reaped_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tests' files go to /dev/shm/nmt-<random> (tests/tmproot.py), a directory per run,
    kept when the run is killed: the next run looks there too, not in /tmp only."""
    shm = tmp_path / "shm"
    killed_run, next_run = shm / "nmt-killed", shm / "nmt-next"
    killed_run.mkdir(parents=True)
    next_run.mkdir()
    monkeypatch.setenv(TMPDIR_VARIABLE, str(killed_run))  # what conftest.py set in that run
    base = short_tmpdir(TMP_PREFIX)  # as Containerd.__init__ makes it
    (base / "state").mkdir()
    (base / "owner").write_text("999999999 1\n")  # its owner is gone
    monkeypatch.setenv(TMPDIR_VARIABLE, str(next_run))
    live = short_tmpdir(TMP_PREFIX)
    Remains(live).claim()
    roots = instance_roots(shm)
    assert roots[0] == Path("/tmp") and killed_run in roots and next_run in roots
    assert reap_stale(roots) == [f"{base}: reaped"]
    assert not base.exists() and live.exists()


def test_the_skips_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root (euid 1000)" in (available.unavailable() or "")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(cgroups, "cpuset_hierarchy", lambda: None)
    assert "no cpuset cgroup controller" in (available.unavailable() or "")
