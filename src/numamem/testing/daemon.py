"""The real ``numamem serve`` as a subprocess, on a temporary directory and a fake machine.

The one subprocess harness of the project (its tests, ``make bench``, ``make
soak``) and of clients that want the daemon itself rather than
:func:`numamem.testing.server.serve_in_process` (same servicers, in process)::

    from numamem.testing.daemon import DaemonProcess, short_tmpdir

    d = DaemonProcess(short_tmpdir(), ["--memory-manager-policy", "None"]).start()
    ...
    d.stop()

Unless the arguments name one, the daemon reads a standard 2-node fake sysfs
tree and an empty cgroup root written under its directory: it never reads the
host's ``/sys`` or cgroups.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from numamem.testing.sysfs import standard_nodes, write_sysfs

STATIC_ARGS = (
    "--memory-manager-policy=Static",
    "--reserved-memory=0:memory=1Gi",
    "--system-reserved=memory=924Mi",
    "--eviction-hard=memory.available<100Mi",
)
"""``make run``'s Static configuration (tests/unit/test_make_run.py runs a daemon with it
beside ``make run``'s own): 1 GiB reserved on node 0, as 924Mi system-reserved plus 100Mi
eviction threshold. One flag an element (policy, reserved memory, system-reserved,
eviction), so a test can swap one; a tuple, so no caller changes it for the others."""

TMPDIR_VARIABLE = "NUMAMEM_TEST_TMPDIR"
"""Where :func:`short_tmpdir` makes its directories instead of ``/tmp`` (a short path too).
numamem's own tests set it to a tmpfs when the machine has one (tests/conftest.py)."""


def short_tmpdir(prefix: str = "nm") -> Path:
    """A private temp dir with a short path (unix socket paths are limited to 107 bytes):
    in ``/tmp``, or in ``$NUMAMEM_TEST_TMPDIR`` when that is set."""
    root = os.environ.get(TMPDIR_VARIABLE) or "/tmp"  # noqa: S108 - mkdtemp: a new 0700 dir
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    path.chmod(0o700)
    return path


def fake_machine_args(root: Path, args: list[str]) -> list[str]:
    """``args`` plus ``--sysfs-root``/``--cgroup-root``/``--proc-root`` of a fake machine under
    ``root``, for each that ``args`` does not give (the fake procfs has no ``iomem``, so
    ``memory-drift-tolerance=auto`` has no bound unless a test writes one)."""
    extra = []
    if "--sysfs-root" not in args and not any(a.startswith("--sysfs-root=") for a in args):
        sysfs = root / "fake-sys"
        if not sysfs.exists():
            write_sysfs(sysfs, standard_nodes(2))
        extra += ["--sysfs-root", str(sysfs)]
    if "--cgroup-root" not in args and not any(a.startswith("--cgroup-root=") for a in args):
        cgroup = root / "fake-cgroup"
        cgroup.mkdir(exist_ok=True)
        extra += ["--cgroup-root", str(cgroup)]
    if "--proc-root" not in args and not any(a.startswith("--proc-root=") for a in args):
        extra += ["--proc-root", str(root / "fake-proc")]
    return [*args, *extra]


@dataclass
class DaemonProcess:
    """A ``numamem serve`` subprocess with its socket in ``root/run`` and state in ``root/state``.

    ``start()`` waits until health says SERVING (``startup_seconds`` is how long
    that took); ``stop()`` sends SIGTERM and returns the exit code; stderr goes to
    a file in ``root`` (:meth:`stderr`).
    """

    root: Path
    args: list[str] = field(default_factory=list)
    cwd: Path | None = None
    program: Sequence[str] = (sys.executable, "-m", "numamem")
    """How to run ``numamem``: this interpreter's, or e.g. the console script of another venv."""
    env: Mapping[str, str] | None = None
    """Variables added to this process's environment (e.g. ``NOTIFY_SOCKET``)."""
    inherit_env: bool = True
    """False: ``env`` is the whole environment (an installed artifact must not see the
    checkout through ``PYTHONPATH`` and the like)."""
    proc: subprocess.Popen[bytes] | None = None
    stderr_path: Path | None = None
    startup_seconds: float = 0.0

    @property
    def socket(self) -> str:
        return str(self.root / "run" / "numamem.sock")

    @property
    def state_dir(self) -> str:
        return str(self.root / "state")

    def command(self) -> list[str]:
        return self._serve(["--shutdown-grace", "2", *self.args])

    def _serve(self, args: list[str]) -> list[str]:
        """``numamem serve`` on this daemon's socket and state dir, on its fake machine."""
        return [
            *self.program,
            "serve",
            "--socket",
            self.socket,
            "--state-dir",
            self.state_dir,
            *fake_machine_args(self.root, args),
        ]

    def start(self, wait: bool = True, timeout: float = 15.0) -> DaemonProcess:
        self.stderr_path = self.root / f"stderr-{time.monotonic_ns()}.log"
        env = dict(self._environment(), PYTHONUNBUFFERED="1")
        began = time.perf_counter()
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.command(), stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=self.cwd
            )
        if wait:
            self.wait_serving(timeout)
            self.startup_seconds = time.perf_counter() - began
        return self

    def _environment(self) -> dict[str, str]:
        base = dict(os.environ) if self.inherit_env else {}
        return dict(base, **(self.env or {}))

    def wait_serving(self, timeout: float = 15.0, poll: float = 0.01) -> None:
        """Return once health is SERVING; raise AssertionError (with stderr) if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}: {self.stderr()}")
            if os.path.exists(self.socket):
                try:
                    with grpc.insecure_channel(f"unix://{self.socket}") as ch:
                        stub = health_pb2_grpc.HealthStub(ch)
                        resp = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                        if resp.status == health_pb2.HealthCheckResponse.SERVING:
                            return
                except grpc.RpcError:
                    pass
            time.sleep(poll)
        raise AssertionError(f"daemon not SERVING after {timeout}s: {self.stderr()}")

    def stderr(self) -> str:
        return (
            self.stderr_path.read_text() if self.stderr_path and self.stderr_path.exists() else ""
        )

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"unix://{self.socket}")

    def stop(self, sig: int = 15, timeout: float = 15.0) -> int:
        """Send ``sig`` (SIGTERM by default) and wait; kills after ``timeout`` seconds."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def run_to_exit(self, *args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """``serve`` on this daemon's socket and state dir with ``args``, expected to exit by itself."""
        return subprocess.run(
            self._serve(list(args)),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.cwd,
            env=self._environment(),
            check=False,
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
