"""Test images as an OCI image layout tar, built with the standard library from a static busybox.

One archive holds two images that share one layer (``bin/busybox`` and a symlink per
applet): :data:`SHELL_IMAGE` (``/bin/sh``) for test containers and :data:`PAUSE_IMAGE`,
whose entrypoint sleeps until killed, as the CRI's sandbox ("pause") image. The archive
is byte-for-byte reproducible from the same busybox binary (every mtime, owner and gzip
header is fixed), so its digests are stable across runs and machines of one architecture.
``ctr images import`` reads the names from the ``io.containerd.image.name`` annotations.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
from pathlib import Path

from tests.containerd import debs

SHELL_IMAGE = "localhost/numamem-test/busybox:1"
PAUSE_IMAGE = "localhost/numamem-test/pause:1"
PAUSE_ENTRYPOINT = ["/bin/sleep", "2147483647"]
"""Sleeps for 68 years; the runtime kills the sandbox with SIGKILL when it stops the pod."""

_OCI_ARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "i686": "386",
}
_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
_INDEX = "application/vnd.oci.image.index.v1+json"


def oci_arch(machine: str | None = None) -> str:
    """The OCI architecture of ``machine`` (``uname -m``; this machine's by default)."""
    machine = machine or platform.machine()
    try:
        return _OCI_ARCH[machine]
    except KeyError:
        raise RuntimeError(
            f"uname -m is {machine!r}: no OCI architecture known for it in tests/containerd/images.py"
        ) from None


def _add(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    for key, value in attrs.items():
        setattr(info, key, value)
    if data is not None:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _layer(busybox: Path) -> bytes:
    """The uncompressed layer: a few empty top-level dirs, bin/busybox and its applet links."""
    applets = subprocess.run(
        [str(busybox), "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("bin", "dev", "etc", "proc", "root", "sys"):
            _add(tar, name, type=tarfile.DIRTYPE, mode=0o755)
        _add(tar, "tmp", type=tarfile.DIRTYPE, mode=0o1777)
        _add(tar, "bin/busybox", data=busybox.read_bytes(), mode=0o755)
        for applet in sorted(set(applets) - {"busybox"}):
            _add(tar, f"bin/{applet}", type=tarfile.SYMTYPE, linkname="busybox", mode=0o777)
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def build_layout_tar(busybox: Path, out: Path, arch: str | None = None) -> None:
    """Write the OCI layout tar of :data:`SHELL_IMAGE` and :data:`PAUSE_IMAGE` to ``out``.

    ``busybox`` is a static busybox binary for ``arch`` (this machine's by default)."""
    arch = arch or oci_arch()
    layer = _layer(busybox)
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0) as z:
        z.write(layer)
    blobs: dict[str, bytes] = {}
    layer_desc = {"mediaType": _LAYER, **_blob(blobs, gz.getvalue())}
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    manifests = []
    for name, entrypoint, cmd in (
        (SHELL_IMAGE, None, ["/bin/sh"]),
        (PAUSE_IMAGE, PAUSE_ENTRYPOINT, None),
    ):
        config = {
            "architecture": arch,
            "os": "linux",
            "config": {
                "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
                "WorkingDir": "/",
                **({"Entrypoint": entrypoint} if entrypoint else {}),
                **({"Cmd": cmd} if cmd else {}),
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": _MANIFEST,
            "config": {"mediaType": _CONFIG, **_blob(blobs, _json(config))},
            "layers": [layer_desc],
        }
        manifests.append(
            {
                "mediaType": _MANIFEST,
                **_blob(blobs, _json(manifest)),
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
        )
    index = {"schemaVersion": 2, "mediaType": _INDEX, "manifests": manifests}
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "oci-layout", data=_json({"imageLayoutVersion": "1.0.0"}), mode=0o644)
        _add(tar, "index.json", data=_json(index), mode=0o644)
        _add(tar, "blobs", type=tarfile.DIRTYPE, mode=0o755)
        _add(tar, "blobs/sha256", type=tarfile.DIRTYPE, mode=0o755)
        for digest, data in sorted(blobs.items()):
            _add(tar, "blobs/sha256/" + digest.split(":", 1)[1], data=data, mode=0o644)


IMAGES_FORMAT = 1
"""Bump when :func:`build_layout_tar` changes what it writes (the cached tars are rebuilt)."""


def cached_layout_tar(busybox: debs.Unpacked) -> Path:
    """The layout tar built from ``busybox`` (a :mod:`debs` entry), cached beside it.

    Built into a scratch file and renamed, under the cache lock: a tar that exists is whole."""
    arch = oci_arch()
    path = debs.cache_dir() / f"images-{IMAGES_FORMAT}-{arch}-{busybox.sha256[:16]}.tar"
    if path.exists():
        return path
    with debs.locked(debs.cache_dir() / ".lock"):
        for stale in debs.cache_dir().glob("images-*.tmp"):  # a builder killed mid-way
            stale.unlink()
        if not path.exists():
            scratch = path.with_suffix(f".{os.getpid()}.tmp")
            build_layout_tar(busybox.root / "bin" / "busybox", scratch, arch)
            os.rename(scratch, path)
    return path
