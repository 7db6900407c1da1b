"""The tests' own infrastructure (review 38b): ports picked again when taken, where the
tests' files go and when they are removed, property tests that ``make soak`` lengthens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numamem.testing.daemon import TMPDIR_VARIABLE
from tests import tmproot
from tests.daemon import can_mount_tmpfs
from tests.ports import ATTEMPTS, IN_USE, on_free_ports

REPO = Path(__file__).resolve().parents[2]


def test_a_start_refused_for_a_port_in_use_is_tried_again_on_new_ports() -> None:
    """Two xdist workers may pick the same free port (bind 0, close): the second daemon is
    refused (SO_REUSEPORT off), and starts again on another."""
    tried: list[list[int]] = []

    def start(ports: list[int]) -> list[int]:
        tried.append(ports)
        if len(tried) < 3:
            raise AssertionError(f"daemon exited with 1: ... cannot listen: [Errno 98] {IN_USE}")
        return ports

    assert on_free_ports(start, 2) == tried[-1]
    assert len(tried) == 3 and all(len(p) == 2 for p in tried)


def test_any_other_refusal_and_the_last_attempt_are_raised() -> None:
    calls: list[list[int]] = []

    def other(ports: list[int]) -> None:
        calls.append(ports)
        raise AssertionError("daemon exited with 1: --socket: ...")

    with pytest.raises(AssertionError, match="--socket"):
        on_free_ports(other)
    assert len(calls) == 1

    def always(ports: list[int]) -> None:
        calls.append(ports)
        raise RuntimeError(IN_USE)

    with pytest.raises(RuntimeError, match=IN_USE):
        on_free_ports(always)
    assert len(calls) == 1 + ATTEMPTS


# --- where the tests' files go (tests/tmproot.py, tests/conftest.py) ---------------------


@pytest.mark.parametrize(
    ("case", "need", "problem"),
    [
        ("tmpfs", 0, None),
        ("tmpfs", 1 << 62, "MiB free, under the 4398046511104 MiB a run may write"),
        ("disk", 0, "is not a tmpfs"),
        ("missing", 0, "is not a writable directory"),
    ],
)
def test_dev_shm_is_taken_only_as_a_tmpfs_with_room(
    tmp_path: Path, case: str, need: int, problem: str | None
) -> None:
    """A container's /dev/shm is 64 MiB unless told otherwise: too small for a run."""
    shm = tmp_path / "shm"
    if case != "missing":
        shm.mkdir()
    mounts = tmp_path / "mounts"
    kind = "tmpfs" if case == "tmpfs" else "ext4"
    mounts.write_text(f"tmpfs /dev tmpfs rw 0 0\n{kind} {shm} {kind} rw,nosuid 0 0\n")
    found = tmproot.shm_problem(shm, need, mounts)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and str(shm) in found


@pytest.mark.parametrize(
    ("status", "kept"),
    [
        (pytest.ExitCode.OK, False),
        (pytest.ExitCode.TESTS_FAILED, True),
        (pytest.ExitCode.INTERRUPTED, False),
        (pytest.ExitCode.INTERNAL_ERROR, True),
        (pytest.ExitCode.USAGE_ERROR, False),
        (pytest.ExitCode.NO_TESTS_COLLECTED, False),
        (None, False),  # ended before its session: an error in the arguments
    ],
)
def test_a_runs_directory_is_kept_only_when_tests_failed(
    status: pytest.ExitCode | None, kept: bool
) -> None:
    assert tmproot.kept(status) is kept


def in_repo(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run in the repository with the environment ``env`` (2 minutes at most), its
    output captured."""
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=120
    )


def _on_own_dev_shm(size: str, after: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run with a tmpfs of ``size`` of its own on /dev/shm (then the shell's ``after``)."""
    env = {k: v for k, v in os.environ.items() if k not in (TMPDIR_VARIABLE, "TMPDIR")}
    script = f'mount -t tmpfs -o size={size} tmpfs /dev/shm && "$@"; {after}'
    return in_repo(["unshare", "--mount", "--", "sh", "-c", script, "sh", *argv], env)


needs_mount = pytest.mark.skipif(not can_mount_tmpfs(), reason="needs root and unshare --mount")


@needs_mount
def test_a_tiny_dev_shm_is_not_where_the_tests_write() -> None:
    script = "import tests.conftest as c; print(c.TEST_TMPDIR, '|', c.NOT_SHM)"
    out = _on_own_dev_shm("1m", "true", sys.executable, "-c", script)
    assert out.returncode == 0, out.stderr
    chosen, why = out.stdout.strip().split(" | ")
    assert chosen == "None", f"the tests would write to {chosen} on a 1 MiB /dev/shm"
    assert why.startswith("/dev/shm has 1.0 MiB free"), why


@needs_mount
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tests/unit/test_does_not_exist.py"], "file or directory not found"),
        (["--no-such-option"], "unrecognized arguments"),
        (["tests/unit/test_test_harness.py", "-k", "no_test_has_this_name"], "deselected"),
    ],
)
def test_a_run_that_fails_no_test_leaves_nothing_in_dev_shm(args: list[str], says: str) -> None:
    """A usage error, an error in the arguments, a run of no test: the run's directory goes."""
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *args]
    out = _on_own_dev_shm("64m", "ls /dev/shm", *pytest_argv)
    assert says in out.stdout + out.stderr, out.stdout + out.stderr
    left = [line for line in out.stdout.splitlines() if line.startswith(tmproot.RUN_PREFIX)]
    assert left == [], f"left in /dev/shm: {left}"


# --- property tests that make soak lengthens (tests/properties.py) -------------------------

OWN_COUNT = {
    "tests/conftest.py": "the profile: NUMAMEM_PROPERTY_EXAMPLES or hypothesis's 100",
    "tests/unit/test_differential.py": "its own variable, NUMAMEM_DIFFERENTIAL_EXAMPLES",
    "tests/unit/test_resize_pod_level_properties_can_fail.py": (
        "one fixed world, run once: it checks that a property test can fail, it is no property"
    ),
}
"""Files that may set ``max_examples`` other than through :func:`tests.properties.examples`."""


def test_every_max_examples_goes_through_examples() -> None:
    """Review 38b: three property tests gave a bare ``max_examples=300``/``60``, which
    overrides the profile: ``make soak`` (NUMAMEM_PROPERTY_EXAMPLES=1000) ran them no longer
    than ``make test``. A count is ``max_examples=examples(n)``."""
    bare = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        name = str(path.relative_to(REPO))
        if name in OWN_COUNT or name == "tests/unit/test_test_harness.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in re.finditer(r"max_examples\s*=\s*(\S+)", line):
                if not match.group(1).startswith("examples("):
                    bare.append(f"{name}:{number}: {line.strip()}")
    assert bare == []


def test_make_soaks_count_reaches_the_property_tests() -> None:
    script = (
        "import importlib\n"
        "for module, name in [\n"
        "    ('tests.unit.test_cli_startup', "
        "'test_groups_and_edge_keys_decode_as_protobuf_decodes_them'),\n"
        "    ('tests.unit.test_nri_framing', "
        "'test_messages_split_into_frames_and_cut_anywhere_round_trip'),\n"
        "    ('tests.unit.test_nri_malformed', 'test_random_frames_never_crash_the_plugin'),\n"
        "]:\n"
        "    test = getattr(importlib.import_module(module), name)\n"
        "    print(name, test._hypothesis_internal_use_settings.max_examples)\n"
    )
    env = dict(os.environ, NUMAMEM_PROPERTY_EXAMPLES="1000")
    out = in_repo([sys.executable, "-c", script], env)
    assert out.returncode == 0, out.stderr
    counts = dict(line.split() for line in out.stdout.splitlines())
    assert len(counts) == 3 and set(counts.values()) == {"1000"}, counts
