"""A private containerd for one test: start, stop, restart, and a cleanup that leaves nothing behind.

Each :class:`Containerd` has its own short tmp dir (:class:`tests.containerd.config.Layout`:
root, state, sockets, NRI socket and plugin dirs, runc root, TMPDIR), so two instances
(pytest-xdist workers) never share a path; what escapes that dir is found and removed by
:class:`tests.containerd.cleanup.Remains`.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from numamem.testing.daemon import short_tmpdir
from tests.containerd import debs, images
from tests.containerd.cleanup import NAMESPACE, TMP_PREFIX, Remains
from tests.containerd.config import Layout, render
from tests.containerd.cri import CriClient, CriError

DISTRIBUTIONS = {"1.7": "containerd-1.7", "2.x": "containerd-2"}
"""The fixture's names for the containerd builds -> their :data:`debs.PACKAGES` keys."""


@dataclass(frozen=True)
class Distribution:
    """One containerd build with what it needs: runc, busybox and the test images' tar."""

    name: str
    containerd: debs.Unpacked
    busybox: debs.Unpacked
    runc: debs.Runc
    images: Path

    @property
    def major(self) -> int:
        return int(self.containerd.version.split(".")[0])

    @property
    def bin(self) -> Path:
        return self.containerd.root / "usr" / "bin"

    def describe(self) -> str:
        return (
            f"containerd {self.containerd.version} ({self.containerd.suite}), "
            f"runc {self.runc.version}, busybox-static {self.busybox.version}"
        )


def distribution(name: str) -> Distribution:
    """The build ``name`` (a key of :data:`DISTRIBUTIONS`), fetched into the cache if missing.

    Raises :class:`debs.RegistryUnreachableError` or :class:`debs.FetchError` (see :func:`debs.fetch`)."""
    entries = debs.fetch([DISTRIBUTIONS[name], "busybox"])
    busybox = entries["busybox"]
    return Distribution(
        name=name,
        containerd=entries[DISTRIBUTIONS[name]],
        busybox=busybox,
        runc=debs.ensure_runc(),
        images=images.cached_layout_tar(busybox),
    )


class Containerd:
    """A private containerd of ``dist`` under ``base`` (a new short tmp dir by default).

    Not thread-safe. ``request_timeout`` is NRI's ``plugin_request_timeout``."""

    def __init__(
        self,
        dist: Distribution,
        base: Path | None = None,
        *,
        request_timeout: str = "2s",
        registration_timeout: str = "5s",
    ) -> None:
        self.dist = dist
        self.base = base or short_tmpdir(TMP_PREFIX)
        self.remains = Remains(self.base)
        self.remains.claim()  # first: a process killed from here on leaves a reapable dir
        self.layout = Layout(self.base)
        for d in self.layout.dirs():
            d.mkdir(parents=True, exist_ok=True)
        self.layout.config.write_text(
            render(
                dist.major,
                self.layout,
                runc=dist.runc.path,
                sandbox_image=images.PAUSE_IMAGE,
                request_timeout=request_timeout,
                registration_timeout=registration_timeout,
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds: list[float] = []
        """How long each start took until the CRI answered Version."""
        self._client: CriClient | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def address(self) -> Path:
        return self.layout.address

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.dist.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "TMPDIR": str(self.layout.tmp),
            "HOME": "/root",
        }

    def start(self, timeout: float = 60.0) -> float:
        """Start containerd and wait until its CRI answers Version; the seconds it took."""
        if self.running:
            raise RuntimeError(f"containerd under {self.base} is already running")
        began = time.monotonic()
        with self.layout.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.dist.bin / "containerd"), "--config", str(self.layout.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        client = self.cri()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"containerd exited {self.proc.returncode} at start:\n{self.log_tail()}"
                )
            try:
                client.version(timeout=0.5)
                break
            except CriError as err:
                if time.monotonic() - began > timeout:
                    raise RuntimeError(
                        f"containerd's CRI did not answer within {timeout} s ({err}):\n"
                        f"{self.log_tail()}"
                    ) from None
                time.sleep(0.05)
        elapsed = time.monotonic() - began
        self.start_seconds.append(elapsed)
        return elapsed

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the shims and containers keep running."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL containerd (a crash); the shims and containers keep running."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc = None

    def restart(self, grace: float = 10.0) -> float:
        self.stop(grace)
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.layout.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- clients -----------------------------------------------------------------------------

    def cri(self) -> CriClient:
        """The instance's CRI client (one channel; it reconnects after a restart)."""
        if self._client is None:
            self._client = CriClient(self.address)
        return self._client

    def ctr(self, *args: str, timeout: float = 60.0) -> str:
        proc = subprocess.run(
            [str(self.dist.bin / "ctr"), "-a", str(self.address), "-n", NAMESPACE, *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def import_images(self, timeout: float = 30.0) -> None:
        """Import the shell and pause images (:mod:`tests.containerd.images`) into ``k8s.io``
        and wait until the CRI lists them (2.x updates its image store from events, after
        the import returns: a sandbox run at once would try to pull the pause image)."""
        platform = f"linux/{images.oci_arch()}"
        self.ctr("images", "import", "--platform", platform, str(self.dist.images))
        wanted = {images.SHELL_IMAGE, images.PAUSE_IMAGE}
        deadline = time.monotonic() + timeout
        while not wanted <= {t for i in self.cri().list_images() for t in i.repo_tags}:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the CRI does not list {sorted(wanted)} {timeout} s after the import"
                )
            time.sleep(0.02)

    # -- cleanup -----------------------------------------------------------------------------

    def register_cgroup(self, parent: str) -> None:
        """Record a pod cgroup made for this instance: :meth:`cleanup` removes it."""
        self.remains.register_cgroup(parent)

    def cleanup(self) -> list[str]:
        """Remove the pods through the CRI if containerd runs, then kill, unmount and remove
        everything the instance and its shims made (:class:`Remains`); what is still there
        afterwards (empty when all went)."""
        if self.running:
            self._remove_pods()
        if self._client is not None:
            self._client.close()
            self._client = None
        fp = self.remains.footprint()
        self.kill()
        return self.remains.cleanup(fp)

    def _remove_pods(self) -> None:
        """Remove the pods through the CRI, as the kubelet would (errors are left to the
        forced cleanup that follows)."""
        client = self.cri()
        with contextlib.suppress(CriError):
            for pod in client.list_pod_sandboxes():
                with contextlib.suppress(CriError):
                    for c in client.list_containers(pod.id):
                        client.stop_container(c.id, timeout=0)
                        client.remove_container(c.id)
                    client.stop_pod_sandbox(pod.id)
                    client.remove_pod_sandbox(pod.id)
