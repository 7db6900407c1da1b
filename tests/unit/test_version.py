"""numamem.version: the commit read from a checkout's files (no git run) or a COMMIT file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from numamem import __version__, version
from tests.tables import named_rows

A = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"
B = "ffeeddccbbaa99887766554433221100ffeeddcc"
SHA256 = "ab" * 32


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


CHECKOUTS = [
    # (case, files under the checkout root, HEAD's commit)
    (
        "a branch, loose ref",
        {".git/HEAD": "ref: refs/heads/main\n", ".git/refs/heads/main": A + "\n"},
        A,
    ),
    (
        "a branch only in packed-refs",
        {
            ".git/HEAD": "ref: refs/heads/main\n",
            ".git/packed-refs": f"# pack-refs with: peeled fully-peeled sorted\n{B} refs/heads/dev\n{A} refs/heads/main\n",
        },
        A,
    ),
    (
        "a loose ref wins over packed-refs",
        {
            ".git/HEAD": "ref: refs/heads/main\n",
            ".git/refs/heads/main": B + "\n",
            ".git/packed-refs": f"{A} refs/heads/main\n",
        },
        B,
    ),
    ("a detached HEAD", {".git/HEAD": A.upper() + "\n"}, A),
    ("a SHA-256 repository", {".git/HEAD": SHA256 + "\n"}, SHA256),
    (
        "a worktree: .git names its gitdir, refs in the common dir",
        {
            ".git": "gitdir: main/.git/worktrees/wt\n",
            "main/.git/worktrees/wt/HEAD": "ref: refs/heads/wt\n",
            "main/.git/worktrees/wt/commondir": "../..\n",
            "main/.git/refs/heads/wt": B + "\n",
        },
        B,
    ),
    (
        "a symbolic ref to a branch",
        {
            ".git/HEAD": "ref: refs/heads/alias\n",
            ".git/refs/heads/alias": "ref: refs/heads/main\n",
            ".git/refs/heads/main": A + "\n",
        },
        A,
    ),
    ("no .git", {}, None),
    ("a branch without a commit yet", {".git/HEAD": "ref: refs/heads/main\n"}, None),
    ("HEAD is not a commit", {".git/HEAD": "not a commit\n"}, None),
    ("a short id is not a commit", {".git/HEAD": A[:12] + "\n"}, None),
    ("a ref leaving the git dir", {".git/HEAD": "ref: refs/../../outside\n", "outside": A}, None),
    ("a .git file without gitdir", {".git": "something else\n"}, None),
    (
        "a loop of symbolic refs",
        {".git/HEAD": "ref: refs/heads/a\n", ".git/refs/heads/a": "ref: refs/heads/a\n"},
        None,
    ),
]


@pytest.mark.parametrize(("files", "expected"), named_rows(CHECKOUTS))
def test_checkout_commit(tmp_path: Path, files: dict[str, str], expected: str | None) -> None:
    write(tmp_path, files)
    assert version.checkout_commit(str(tmp_path)) == expected


def test_the_commit_of_a_checkout_then_of_a_commit_file(tmp_path: Path) -> None:
    # Run from a checkout (<root>/src/numamem): HEAD's commit, before any COMMIT file.
    write(tmp_path / "checkout", {".git/HEAD": A + "\n", f"src/numamem/{version.COMMIT_FILE}": B})
    assert version.find_commit(str(tmp_path / "checkout" / "src" / "numamem")) == A
    # Installed (no src/ parent): the COMMIT file a build wrote; none or a bad one: unknown.
    installed = tmp_path / "site-packages" / "numamem"
    installed.mkdir(parents=True)
    assert version.find_commit(str(installed)) == version.UNKNOWN
    (installed / version.COMMIT_FILE).write_text(f"{B}\n")
    assert version.find_commit(str(installed)) == B
    (installed / version.COMMIT_FILE).write_text("v0.1.0\n")
    assert version.find_commit(str(installed)) == version.UNKNOWN
    # A checkout whose HEAD cannot be read falls back to the file too.
    write(tmp_path / "broken", {".git/HEAD": "junk", f"src/numamem/{version.COMMIT_FILE}": B})
    assert version.find_commit(str(tmp_path / "broken" / "src" / "numamem")) == B


def test_this_checkout_and_the_build_info() -> None:
    package = Path(version.__file__).resolve().parent
    info = version.build_info()
    assert info["version"] == __version__
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["commit"] == version.find_commit(str(package))
    if package.parent.name == "src" and (package.parent.parent / ".git").exists():
        assert len(info["commit"]) in (40, 64), info  # this checkout's HEAD
        assert version.describe() == f"numamem {__version__} (commit {info['commit'][:12]})"


def test_importing_it_imports_nothing_but_the_standard_library_it_names() -> None:
    """``numamem --version`` may use it: it must stay cheap (no grpc, protobuf, pathlib, re)."""
    code = (
        "import sys; before = set(sys.modules); import numamem.version; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert set(out.stdout.split()) <= {"numamem", "numamem.version", "__future__"}, out.stdout
