"""Debian's containerd and busybox-static, fetched once into a cache outside the repository; runc.

:func:`fetch` downloads the packages of :data:`PACKAGES` with ``apt-get download``
through a private sources list (the archive URL of this machine's own apt sources, the
suites each package comes from), so the machine's sources, lists and dpkg database are
never changed; apt checks the archive's signatures with the machine's keyring (the
``Signed-By`` of the machine's entry, or apt's trusted keys). Each package is unpacked
with ``dpkg -x`` (nothing is installed) into ``<cache>/v1/<key>/root`` beside a
``manifest.json`` recording what was fetched (package, version, suite, URL, sha256).

The cache (``$NUMAMEM_TEST_CACHE``, by default ``/var/cache/numamem-tests``) is safe for
concurrent processes: every entry is built in a scratch dir and renamed into place, so an
entry that exists is complete; builders take an exclusive ``flock`` on ``<cache>/v1/.lock``
and look again once they hold it. ``rm -rf <cache>`` clears it.

:func:`ensure_runc` installs Debian's ``runc`` with ``apt-get install`` when the machine has
none: the one change the harness makes to the system.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

CACHE_ENV = "NUMAMEM_TEST_CACHE"
DEFAULT_CACHE = Path("/var/cache/numamem-tests")
LAYOUT = "v1"
"""The cache layout's version: bump it when an entry's contents change meaning."""


class RegistryUnreachableError(Exception):
    """The Debian archive could not be reached on a first download (``url`` was tried)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"no Debian registry: {url} unreachable ({reason})")
        self.url = url


class FetchError(Exception):
    """apt or dpkg failed on a reachable archive: the command and its output are in the message."""


@dataclass(frozen=True)
class Package:
    """A Debian package the harness unpacks: ``name`` from ``suite``, a version ``version_prefix``*."""

    key: str
    name: str
    suite: str
    version_prefix: str


PACKAGES = {
    p.key: p
    for p in (
        Package("containerd-1.7", "containerd", "trixie", "1.7."),
        Package("containerd-2", "containerd", "sid", "2."),
        Package("busybox", "busybox-static", "bookworm", "1:1."),
    )
}


@dataclass(frozen=True)
class Unpacked:
    """A cache entry: the package's files under ``root`` and what was fetched."""

    key: str
    package: str
    version: str
    suite: str
    url: str
    sha256: str
    root: Path

    @classmethod
    def load(cls, entry: Path) -> Unpacked:
        data = json.loads((entry / "manifest.json").read_text())
        return cls(**{**data, "root": entry / "root"})


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE) / LAYOUT


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Archive:
    """The archive URL of this machine's own apt sources and the keyring its entry names."""

    url: str
    signed_by: str


def machine_archive(etc: Path = Path("/etc/apt")) -> Archive:
    """The first ``deb`` entry of this machine's sources (deb822 ``*.sources``, then
    ``sources.list``) whose suite is a release itself (not ``-security``/``-updates``)."""
    for path in sorted((etc / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.strip()
            suites = fields.get("suites", "").split()
            if "deb" in fields.get("types", "").split() and any("-" not in s for s in suites):
                return Archive(fields.get("uris", "").split()[0], fields.get("signed-by", ""))
    for path in [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            m = re.match(r"\s*deb\s+(\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m and "-" not in m.group(3):
                opts = re.search(r"signed-by=(\S+?)[\s\]]", m.group(1) or "")
                return Archive(m.group(2), opts.group(1) if opts else "")
    raise FetchError(
        f"no Debian archive in {etc}/sources.list.d/*.sources or {etc}/sources.list: "
        "the harness fetches containerd through the machine's own archive URL"
    )


def _run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise FetchError(
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout + proc.stderr


def _reachable(url: str, suite: str) -> None:
    probe = f"{url.rstrip('/')}/dists/{suite}/InRelease"
    try:
        with urllib.request.urlopen(urllib.request.Request(probe, method="HEAD"), timeout=15):
            pass
    except (urllib.error.URLError, OSError) as err:
        raise RegistryUnreachableError(probe, str(err)) from None


def _download(work: Path, packages: list[Package], archive: Archive) -> dict[str, Path]:
    """apt-get update + download of ``packages`` through a private sources list in ``work``."""
    work.chmod(0o755)  # apt fetches as _apt: it must reach lists/partial
    option = f"[signed-by={archive.signed_by}] " if archive.signed_by else ""
    suites = sorted({p.suite for p in packages})
    sources = work / "sources.list"
    sources.write_text("".join(f"deb {option}{archive.url} {s} main\n" for s in suites))
    (work / "lists" / "partial").mkdir(parents=True)
    (work / "cache" / "archives" / "partial").mkdir(parents=True)
    debs = work / "debs"
    debs.mkdir()
    apt = [
        "apt-get",
        "-q",
        "-o", f"Dir::Etc::sourcelist={sources}",
        "-o", "Dir::Etc::sourceparts=-",
        "-o", f"Dir::State::Lists={work / 'lists'}",
        "-o", f"Dir::Cache={work / 'cache'}",
        "-o", "Acquire::Languages=none",
    ]  # fmt: skip
    out = _run([*apt, "update"])
    if re.search(r"^(W: (GPG|Failed)|E:)", out, re.MULTILINE):
        raise FetchError(f"apt-get update through {sources} failed:\n{out}")
    _run([*apt, "download", *(f"{p.name}/{p.suite}" for p in packages)], cwd=debs)
    found: dict[str, Path] = {}
    for p in packages:
        candidates = [
            d
            for d in debs.glob(f"{p.name}_*.deb")
            if d not in found.values() and _field(d, "Version").startswith(p.version_prefix)
        ]
        if not candidates:
            got = sorted(d.name for d in debs.iterdir())
            raise FetchError(
                f"{p.name}/{p.suite}: no version {p.version_prefix}* among {got}: "
                f"update PACKAGES in tests/containerd/debs.py"
            )
        found[p.key] = candidates[0]
    return found


def _field(deb: Path, name: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), name]).strip()


def fetch(keys: list[str]) -> dict[str, Unpacked]:
    """The cache entries of ``keys`` (of :data:`PACKAGES`), fetching first every entry of
    :data:`PACKAGES` that is missing when one of ``keys`` is.

    Raises :class:`RegistryUnreachableError` when an entry is missing and the archive cannot be
    reached, :class:`FetchError` when apt or dpkg fails otherwise."""
    cache = cache_dir()
    missing = [k for k in keys if not (cache / k).is_dir()]
    if missing:
        with locked(cache / ".lock"):
            for stale in cache.glob(".work-*"):  # left by a process killed while it held the lock
                shutil.rmtree(stale, ignore_errors=True)
            if any(not (cache / k).is_dir() for k in keys):
                # all that is missing, in one apt session: the next build needs no second one
                _fetch_locked(cache, [p for k, p in PACKAGES.items() if not (cache / k).is_dir()])
    return {k: Unpacked.load(cache / k) for k in keys}


def _fetch_locked(cache: Path, packages: list[Package]) -> None:
    if shutil.which("apt-get") is None:
        raise RegistryUnreachableError(
            "apt-get", "apt-get not found: the harness fetches Debian packages"
        )
    archive = machine_archive()
    for suite in sorted({p.suite for p in packages}):
        _reachable(archive.url, suite)
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=cache))
    try:
        debs = _download(work, packages, archive)
        for p in packages:
            entry = work / p.key
            entry.mkdir()
            _run(["dpkg-deb", "-x", str(debs[p.key]), str(entry / "root")])
            record = Unpacked(
                key=p.key,
                package=p.name,
                version=_field(debs[p.key], "Version"),
                suite=p.suite,
                url=archive.url,
                sha256=hashlib.sha256(debs[p.key].read_bytes()).hexdigest(),
                root=entry / "root",
            )
            manifest = {k: v for k, v in asdict(record).items() if k != "root"}
            (entry / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
            os.rename(entry, cache / p.key)  # the entry appears complete or not at all
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class Runc:
    path: Path
    version: str
    installed_now: bool


RUNC_PATHS = (Path("/usr/sbin/runc"), Path("/usr/bin/runc"))


def _runc_found() -> Path | None:
    return next((p for p in RUNC_PATHS if os.access(p, os.X_OK)), None)


def ensure_runc() -> Runc:
    """The machine's runc; Debian's ``runc`` package is installed with apt-get first if missing
    (its lists are updated first if apt cannot find the package)."""
    installed_now = False
    found = _runc_found()
    if found is None:
        with locked(cache_dir() / ".lock"):
            found = _runc_found()
            if found is None:
                env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
                install = [
                    "apt-get", "install", "-y", "-q", "--no-install-recommends",
                    "-o", "DPkg::Lock::Timeout=300", "runc",
                ]  # fmt: skip
                try:
                    _run(install, env=env)
                except FetchError:
                    _run(["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=300"], env=env)
                    _run(install, env=env)
                installed_now = True
                found = _runc_found()
        if found is None:
            raise FetchError(f"apt-get install runc left no runc at {RUNC_PATHS}")
    version = _run([str(found), "--version"]).splitlines()[0].removeprefix("runc version ").strip()
    return Runc(found, version, installed_now)
