"""What ships, not the checkout: the container image's build context, the sdist and the wheel.

Each is installed into an empty venv the way its user installs it and then has to work:
``numamem --version``, ``numamem serve`` with the DaemonSet's arguments on a fake sysfs
tree, and the DaemonSet's probes against it (the exec probe over the socket, the kubelet's
gRPC probe on --health-port).

There is no Docker engine here, so the image is built as ``docker build`` would see it: the
tracked files minus ``.dockerignore`` (tests/dockerignore.py, Docker's own matching rules),
installed with the Containerfile's ``pip install`` of the copied context. The sdist and the
wheel come from ``python -m build`` of the tracked files, the wheel built from the sdist.

Every subprocess gets an environment built from scratch (:func:`clean_env`): nothing
that points Python at another tree (``PYTHONPATH``, ``PYTHONHOME``, ``VIRTUAL_ENV``...)
reaches it, only what pip needs to reach the index; and the installed ``numamem`` must
be imported from its venv. (With ``PYTHONPATH`` set to the checkout's ``src``, the
image's venv imported the checkout and the test passed on d2bff35's .dockerignore.)

Time: every install is a fresh venv, but pip's cache (the dev install just downloaded
the same wheels) makes each a few seconds; the context and the sdist are built by pip in
an isolated environment as a user's pip would build them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from numamem import __version__
from numamem.testing.daemon import DaemonProcess, short_tmpdir
from numamem.testing.sysfs import standard_nodes, write_sysfs
from tests.daemon import REPO
from tests.deploy_manifests import (
    container_env,
    daemonset_docs,
    deploy_file,
    expand,
    numamem_container,
    probe_command,
)
from tests.dockerignore import copy_context, tracked_files
from tests.pip_tool import pip_command
from tests.ports import on_free_ports

pytestmark = pytest.mark.e2e

IMAGE_SOURCE = "/src/numamem"
"""Where deploy/Containerfile copies the context and what it installs."""

KEPT_VARIABLES = frozenset(
    {
        "HOME",  # pip's cache and configuration (~/.cache/pip, ~/.config/pip/pip.conf)
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "PIP_CONFIG_FILE",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_NO_INDEX",
        "PIP_TRUSTED_HOST",
        "PIP_CERT",
        "PIP_CLIENT_CERT",
        "PIP_PROXY",
        "PIP_CACHE_DIR",
        "PIP_NO_CACHE_DIR",
        "PIP_DEFAULT_TIMEOUT",
        "PIP_TIMEOUT",
        "PIP_RETRIES",
        "PIP_KEYRING_PROVIDER",
        "PIP_DISABLE_PIP_VERSION_CHECK",
    }
)
"""What of this process's environment the artifacts' subprocesses get: what pip needs to
reach the index (certificates, proxies, its configuration and cache), the locale."""
SYSTEM_PATH = "/usr/bin:/bin"


def clean_env(path: str = SYSTEM_PATH) -> dict[str, str]:
    """An environment from scratch: :data:`KEPT_VARIABLES`, ``PATH`` = ``path``, no user
    site-packages; no ``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONSTARTUP``,
    ``PYTHONUSERBASE``, ``VIRTUAL_ENV`` or any other variable."""
    env = {k: v for k, v in os.environ.items() if k in KEPT_VARIABLES}
    env.update(PATH=path, PYTHONNOUSERSITE="1")
    return env


def empty_venv(path: Path) -> Path:
    """A new venv without pip or any package; returns its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120
    )
    return path / "bin" / "python"


def install(target: Path, into: Path) -> Path:
    """``pip install TARGET`` into a new empty venv at ``into``; returns its ``numamem``."""
    python = empty_venv(into)
    result = subprocess.run(
        [
            *pip_command(),
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-compile",
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return into / "bin" / "numamem"


def daemonset_serve_args(root: Path, free: list[int]) -> tuple[list[str], dict[str, int]]:
    """The DaemonSet container's ``serve`` arguments with its host paths moved under ``root``
    (a fake /sys, deploy/ for the ConfigMap's file), loopback for the pod IP and the two
    ``free`` ports for 9440/9441; and the port map."""
    container = numamem_container(daemonset_docs()["DaemonSet"])
    args = expand(container["args"], dict(container_env(container), POD_IP="127.0.0.1"))
    assert args[0] == "serve"
    write_sysfs(root / "sys", standard_nodes(2))
    (root / "sys" / "fs" / "cgroup").mkdir(parents=True, exist_ok=True)
    moved = {
        "/run/numamem": str(root / "run"),
        "/var/lib/numamem": str(root / "state"),
        "/host/sys": str(root / "sys"),
        "/etc/numamem": str(deploy_file("numamem.yaml").parent),
        "/var/lib/kubelet/pod-resources": str(root / "kubelet"),
    }
    ports = {"9440": free[0], "9441": free[1]}
    out = []
    for arg in args[1:]:
        name, _, value = arg.partition("=")
        for old, new in moved.items():
            if value == old or value.startswith(old + "/"):
                value = new + value[len(old) :]
        if name in ("--health-port", "--metrics-port"):
            value = str(ports[value])
        out.append(f"{name}={value}")
    assert not any("/host/" in a or "/etc/" in a for a in out), out
    return out, {"health": ports["9440"], "metrics": ports["9441"]}


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=cwd, timeout=60, check=False
    )


def serve_and_probe(numamem: Path, version_line: str = f"numamem {__version__}") -> None:
    """``numamem --version`` (``version_line``: the image names the commit it was built from,
    the sdist and the wheel have none to name); ``serve`` with the DaemonSet's arguments; its probes pass while
    it serves and the exec probe fails once it stopped. Everything runs in a temporary
    directory, so nothing of the checkout is importable."""
    root = short_tmpdir("art")
    try:
        _serve_and_probe(numamem, root, version_line)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _serve_and_probe(numamem: Path, root: Path, version_line: str) -> None:
    venv = numamem.parent.parent
    imported = run(
        [str(venv / "bin" / "python"), "-c", "import numamem; print(numamem.__file__)"],
        root,
        clean_env(),
    )
    assert imported.returncode == 0, imported.stderr
    location = Path(imported.stdout.strip()).resolve()
    assert location.is_relative_to(venv.resolve()), (
        f"the installed numamem was imported from {location}, not from its venv {venv}"
    )
    version = subprocess.run(
        [str(numamem), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=root,
        env=clean_env(),
    )
    assert (version.returncode, version.stdout.strip()) == (0, version_line), version.stderr
    started: list[DaemonProcess] = []

    def serve(free: list[int]) -> tuple[DaemonProcess, dict[str, int]]:
        args, ports = daemonset_serve_args(root, free)
        daemon = DaemonProcess(
            root, args, cwd=root, program=(str(numamem),), env=clean_env(), inherit_env=False
        )
        started.append(daemon)
        return daemon.start(timeout=60), ports

    try:
        daemon, ports = on_free_ports(serve, 2)
        container = numamem_container(daemonset_docs()["DaemonSet"])
        env = clean_env(f"{numamem.parent}:{SYSTEM_PATH}")
        for probe in ("startupProbe", "livenessProbe"):
            command = [
                part.replace("/run/numamem/numamem.sock", daemon.socket)
                for part in probe_command(container, probe)
            ]
            result = run(command, root, env)
            assert (result.returncode, result.stdout.strip()) == (0, "SERVING"), (
                shlex.join(command),
                result.stderr,
            )
        assert container["readinessProbe"]["grpc"]["port"] == 9440
        grpc_probe = run(
            [str(numamem), "health", f"--address=127.0.0.1:{ports['health']}", "--timeout=5"],
            root,
            env,
        )
        assert grpc_probe.returncode == 0, grpc_probe.stderr
        assert daemon.stop() == 0, daemon.stderr()
        assert run(command, root, env).returncode == 1  # no daemon: the probe fails
    finally:
        for each in started:
            each.kill()


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    root = short_tmpdir("art")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def build_distributions(work: Path) -> dict[str, Path]:
    """``python -m build`` of the tracked files: the sdist, and the wheel built from it."""
    checkout = work / "checkout"
    for name in tracked_files(REPO):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, checkout / name)
    dist = work / "dist"
    # --no-isolation: the dev venv has the build backend (hatchling); isolation would only
    # install the same backend again, twice. pip builds the sdist with isolation below.
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(checkout)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    [sdist] = dist.glob("numamem-*.tar.gz")
    [wheel] = dist.glob("numamem-*.whl")
    return {"sdist": sdist, "wheel": wheel}


IMAGE_COMMIT = "0123456789abcdef0123456789abcdef01234567"
"""The ``--build-arg NUMAMEM_COMMIT`` the image test builds with."""


def image_context(work: Path) -> Path:
    """The Containerfile's ``COPY . /src/numamem`` of the context docker build would send,
    and what its RUN does before ``pip install`` (the COMMIT file from the build argument
    :data:`IMAGE_COMMIT`), run by sh on the copy."""
    containerfile = deploy_file("Containerfile").read_text().splitlines()
    assert 'ARG NUMAMEM_COMMIT=""' in containerfile
    assert f"COPY . {IMAGE_SOURCE}" in containerfile
    [run_line] = [line for line in containerfile if line.startswith("RUN ")]
    before, pip, _ = run_line.removeprefix("RUN ").partition(
        f" && pip install --no-cache-dir {IMAGE_SOURCE} "
    )
    assert pip, run_line
    context = work / "context" / IMAGE_SOURCE.strip("/")
    files = copy_context(REPO, context)
    assert ".dockerignore" in files and "deploy/Containerfile" in files
    assert not any(f.startswith((".venv/", ".git/", ".numamem/")) for f in files)
    assert "src/numamem/COMMIT" not in files
    step = before.replace(f" {IMAGE_SOURCE}/", f" {context}/")  # the image's path, not its parts
    subprocess.run(["sh", "-c", step], check=True, env={"NUMAMEM_COMMIT": IMAGE_COMMIT})
    assert (context / "src" / "numamem" / "COMMIT").read_text() == IMAGE_COMMIT + "\n"
    return context


@pytest.fixture(scope="module")
def installed() -> Iterator[dict[str, Path]]:
    """The image context, the sdist and the wheel, each installed into its own empty venv
    (the three installs run at once: they spend most of their time unpacking and waiting)."""
    work = short_tmpdir("art")
    try:
        targets = {"image": image_context(work), **build_distributions(work)}
        with ThreadPoolExecutor(len(targets)) as pool:
            futures = {
                kind: pool.submit(install, target, work / f"{kind}-venv")
                for kind, target in targets.items()
            }
            yield {kind: future.result() for kind, future in futures.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_image_context_installs_serves_and_passes_its_probes(
    installed: dict[str, Path],
) -> None:
    """On d2bff35 .dockerignore left the committed src/numamem/v1 code out of the context:
    every command of the image failed with ImportError: cannot import name
    'memorymanager_pb2' from 'numamem.v1', the probes included."""
    serve_and_probe(installed["image"], f"numamem {__version__} (commit {IMAGE_COMMIT[:12]})")


@pytest.mark.parametrize("kind", ["sdist", "wheel"])
def test_the_sdist_and_the_wheel_install_into_an_empty_venv_and_serve(
    installed: dict[str, Path], kind: str
) -> None:
    serve_and_probe(installed[kind])


def test_the_environment_of_the_artifacts_is_built_from_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing that points Python at the checkout (or any other tree) gets through."""
    leaks = {
        "PYTHONPATH": str(REPO / "src"),
        "PYTHONHOME": "/usr",
        "PYTHONSTARTUP": str(REPO / "x.py"),
        "PYTHONUSERBASE": str(REPO),
        "PYTHONSAFEPATH": "",
        "VIRTUAL_ENV": str(REPO / ".venv"),
        "PIP_TARGET": str(REPO),
        "PIP_PREFIX": str(REPO),
        "PIP_USER": "1",
        "NUMAMEM_SOCKET": "/tmp/x.sock",
    }
    for name, value in leaks.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIP_INDEX_URL", "https://pypi.example/simple")
    env = clean_env()
    assert not set(leaks) & set(env)
    assert env["PIP_INDEX_URL"] == "https://pypi.example/simple"
    assert (env["PATH"], env["PYTHONNOUSERSITE"]) == (SYSTEM_PATH, "1")
