"""What this numamem is: its version, the git commit it was built from, the Python running it.

Standard library only and nothing read at import, so that ``numamem --version`` stays cheap.
The daemon says :func:`build_info` in its start-up log line, in the
``numamem_build_info`` metric and over gRPC (``numamem.v1.Info/GetBuildInfo``).

The commit is found, in this order, without running git:

1. the checkout numamem runs from, when it runs from one (this file is
   ``<checkout>/src/numamem/version.py``: ``make run``, an editable install): its HEAD
   read from ``.git`` (a worktree's ``.git`` file, a branch in ``packed-refs`` and a
   detached HEAD included). Uncommitted changes are not seen: it is HEAD's commit;
2. the file ``COMMIT`` beside this module, one line: the commit, written by whoever
   builds a package or image from a checkout before installing it
   (``git rev-parse HEAD > src/numamem/COMMIT``; the image's build context has no
   ``.git``, see ``.dockerignore``);
3. otherwise :data:`UNKNOWN`.

A value that is not 40 or 64 hexadecimal digits is not a commit and is ignored.
"""

from __future__ import annotations

import os
import sys

from numamem import __version__

UNKNOWN = "unknown"
"""The commit when neither a checkout nor a ``COMMIT`` file says it."""

COMMIT_FILE = "COMMIT"
_READ_LIMIT = 4096
"""Bytes read of ``HEAD``, a ref or the ``COMMIT`` file (each holds one line)."""
_MAX_SYMREFS = 5
"""Symbolic refs followed from HEAD before giving up."""
_HEX = frozenset("0123456789abcdef")
_found: list[str] = []
"""The commit once read (at most one entry)."""


def version() -> str:
    """numamem's version (``numamem.__version__``)."""
    return __version__


def python_version() -> str:
    """The running Python's version, e.g. ``3.11.9``."""
    info = sys.version_info
    return f"{info.major}.{info.minor}.{info.micro}"


def commit() -> str:
    """The git commit numamem was built from (lowercase hex), or :data:`UNKNOWN`; see the
    module docstring. Read once per process; never raises."""
    if not _found:
        _found.append(find_commit(os.path.dirname(os.path.realpath(__file__))))
    return _found[0]


def find_commit(package_dir: str) -> str:
    """The commit of the numamem package at ``package_dir`` (see the module docstring), or
    :data:`UNKNOWN`."""
    found = None
    if os.path.basename(os.path.dirname(package_dir)) == "src":
        found = checkout_commit(os.path.dirname(os.path.dirname(package_dir)))
    if found is None:
        found = _commit_of(_read(os.path.join(package_dir, COMMIT_FILE)))
    return found or UNKNOWN


def build_info() -> dict[str, str]:
    """``version``, ``commit`` and ``python``, as the log line, the metric and the RPC say them."""
    return {"version": version(), "commit": commit(), "python": python_version()}


def describe() -> str:
    """One line for ``--version``: ``numamem 0.1.0 (commit 1a2b3c4d5e6f)``."""
    found = commit()
    return f"numamem {version()}" + ("" if found == UNKNOWN else f" (commit {found[:12]})")


def checkout_commit(root: str) -> str | None:
    """HEAD's commit of the git checkout at ``root`` (None when there is none or it cannot be
    read), from the files alone."""
    dotgit = os.path.join(root, ".git")
    if os.path.isfile(dotgit):  # a worktree or submodule: "gitdir: <path>"
        text = _read(dotgit) or ""
        if not text.startswith("gitdir:"):
            return None
        gitdir = os.path.join(root, text.removeprefix("gitdir:").strip())  # kept if absolute
    elif os.path.isdir(dotgit):
        gitdir = dotgit
    else:
        return None
    pointer = _read(os.path.join(gitdir, "commondir"))
    common = os.path.join(gitdir, pointer.strip()) if pointer else gitdir
    head = _read(os.path.join(gitdir, "HEAD"))
    for _ in range(_MAX_SYMREFS):
        if head is None:
            return None
        if not head.startswith("ref:"):
            return _commit_of(head)
        ref = head.removeprefix("ref:").strip()
        if not ref.startswith("refs/") or ".." in ref.split("/"):
            return None
        head = (
            _read(os.path.join(gitdir, ref))
            or _read(os.path.join(common, ref))
            or _packed_ref(common, ref)
        )
    return None


def _packed_ref(common: str, ref: str) -> str | None:
    """The commit ``packed-refs`` gives ``ref``."""
    try:
        with open(os.path.join(common, "packed-refs"), encoding="utf-8", errors="replace") as f:
            for line in f:
                value, _, name = line.rstrip("\n").partition(" ")
                if name == ref:
                    return value
    except OSError:
        return None
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read(_READ_LIMIT)
    except OSError:
        return None


def _commit_of(text: str | None) -> str | None:
    value = (text or "").strip().lower()
    if len(value) in (40, 64) and _HEX.issuperset(value):
        return value
    return None
