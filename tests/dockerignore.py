"""The build context ``docker build`` sends: the files of a directory minus ``.dockerignore``.

An exact port of Docker's rules (github.com/moby/patternmatcher, the matcher both the
classic builder and BuildKit use, and its ``ignorefile.ReadAll``), not a look-alike:

* lines starting with ``#`` are comments (before trimming); each line is trimmed, a
  leading ``!`` makes an exception, the rest goes through Go's ``filepath.Clean`` and a
  leading ``/`` is dropped (so ``/build``, ``build/`` and ``./build`` are ``build``);
* ``*`` is any run of non-``/`` characters, ``?`` one, ``[...]`` a class, ``\\`` escapes;
  ``**`` is any number of directories (zero included), a leading ``**`` matches any
  suffix, a trailing one any prefix;
* a path is excluded when a pattern matches it *or one of its parent directories*
  (``MatchesOrParentMatches``), and the last pattern that matches wins, so ``!`` lines
  re-include what earlier lines excluded.

No library on PyPI implements these rules (gitignore matchers such as pathspec differ:
``*`` there matches across directories in some positions, a pattern without ``/`` matches
at any depth). ``tests/unit/test_dockerignore.py`` checks this port against cases of
moby's own test table.

moby compiles each pattern with Go's ``regexp`` (RE2), and Python's ``re`` reads some of
it differently: the port anchors with ``\\Z`` (Python's ``$`` also matches before a final
newline) and leaves ``.`` unable to match a newline, as RE2 does. What RE2 and ``re`` read
differently and the port does not translate is refused with a clear error, never guessed:
POSIX classes (``[[:digit:]]``) and backslash escapes of letters and digits (``\\d``,
``\\w``, ``\\pL``, ``\\1``: RE2's are ASCII or unknown, Python's Unicode or backreferences).

Only ``.dockerignore`` is modelled: BuildKit reads ``<Dockerfile>.dockerignore`` beside the
Dockerfile instead, and podman/buildah ``.containerignore`` first; :func:`context_files`
refuses a checkout that has either (:data:`OTHER_IGNORE_FILES`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ESCAPE = set(".+()|{}$")
CONTAINERFILE = "deploy/Containerfile"
OTHER_IGNORE_FILES = (f"{CONTAINERFILE}.dockerignore", ".containerignore")
"""Ignore files that take precedence over ``.dockerignore`` for ``-f deploy/Containerfile``
(BuildKit, podman/buildah), which this port does not model."""
_POSIX_CLASS = re.compile(r"\[:\^?[a-z]*:\]")


def go_clean(path: str) -> str:
    """Go's ``path/filepath.Clean`` on a slash-separated path."""
    if path == "":
        return "."
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(part)
    cleaned = "/".join(parts)
    if rooted:
        return "/" + cleaned
    return cleaned or "."


def go_dir(path: str) -> str:
    """Go's ``filepath.Dir``: everything before the last ``/``, cleaned."""
    return go_clean(path[: path.rfind("/") + 1])


def read_ignore_file(text: str) -> list[str]:
    """``ignorefile.ReadAll``: the patterns of a ``.dockerignore`` text."""
    patterns = []
    for n, raw in enumerate(text.splitlines()):
        line = raw.removeprefix("\ufeff") if n == 0 else raw
        if line.startswith("#"):
            continue
        pattern = line.strip()
        if not pattern:
            continue
        invert = pattern.startswith("!")
        if invert:
            pattern = pattern[1:].strip()
        if pattern:
            pattern = go_clean(pattern)
            if len(pattern) > 1 and pattern.startswith("/"):
                pattern = pattern[1:]
        patterns.append("!" + pattern if invert else pattern)
    return patterns


@dataclass
class _Pattern:
    cleaned: str
    exclusion: bool
    kind: str = ""
    regexp: re.Pattern[str] | None = None

    def __post_init__(self) -> None:
        self._compile()

    def _compile(self) -> None:
        """``Pattern.compile`` of moby/patternmatcher, for the ``/`` separator."""
        pattern, regex, kind = self.cleaned, "^", "exact"
        i = 0
        while i < len(pattern):
            ch = pattern[i]
            at_start = i == 0
            i += 1
            if ch == "*":
                if i < len(pattern) and pattern[i] == "*":
                    i += 1
                    if i < len(pattern) and pattern[i] == "/":
                        i += 1  # "**/" is "**"
                    if i == len(pattern):
                        if kind == "exact":
                            kind = "prefix"
                        else:
                            regex += ".*"
                            kind = "regexp"
                    else:
                        regex += "(.*/)?"
                        kind = "regexp"
                    if at_start:
                        kind = "suffix"
                else:
                    regex += "[^/]*"
                    kind = "regexp"
            elif ch == "?":
                regex += "[^/]"
                kind = "regexp"
            elif ch in _ESCAPE:
                regex += "\\" + ch
            elif ch == "\\":
                if i < len(pattern):
                    if pattern[i].isascii() and pattern[i].isalnum():
                        escape = "\\" + pattern[i]
                        raise ValueError(
                            f".dockerignore: pattern {self.cleaned!r}: the escape "
                            f"{escape} means something else in Go's RE2 (which "
                            "moby compiles patterns with) than in Python's re; this port does "
                            "not translate it: write the characters out (e.g. [0-9] for \\d)"
                        )
                    regex += "\\" + pattern[i]
                    i += 1
                    kind = "regexp"
                else:
                    regex += "\\"  # moby leaves a trailing backslash as it is
            elif ch in "[]":
                regex += ch
                kind = "regexp"
            else:
                regex += ch
        self.kind = kind
        if kind == "regexp":
            posix = _POSIX_CLASS.search(self.cleaned)
            if posix is not None:
                raise ValueError(
                    f".dockerignore: pattern {self.cleaned!r}: the POSIX class "
                    f"{posix.group()!r} is RE2 syntax (which moby compiles patterns with) that "
                    "Python's re does not read; this port does not translate it: write the "
                    "class out (e.g. [0-9] for [:digit:])"
                )
            try:
                # \Z: Python's $ also matches before a final newline, RE2's only at the end;
                # no re.S: RE2's "." does not match a newline either.
                self.regexp = re.compile(regex + "\\Z")
            except re.error as err:
                raise ValueError(f".dockerignore: bad pattern {self.cleaned!r}: {err}") from err

    def match(self, path: str) -> bool:
        if self.kind == "exact":
            return path == self.cleaned
        if self.kind == "prefix":
            return path.startswith(self.cleaned[:-2])
        if self.kind == "suffix":
            suffix = self.cleaned[2:]
            if path.endswith(suffix):
                return True
            return suffix.startswith("/") and path == suffix[1:]
        assert self.regexp is not None
        return self.regexp.match(path) is not None


class PatternMatcher:
    """``patternmatcher.New`` + ``MatchesOrParentMatches``."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns: list[_Pattern] = []
        for raw in patterns:
            text = raw.strip()
            if not text:
                continue
            text = go_clean(text)
            exclusion = text.startswith("!")
            if exclusion:
                if len(text) == 1:
                    raise ValueError('illegal exclusion pattern: "!"')
                text = text[1:]
            self.patterns.append(_Pattern(text, exclusion))

    def matches_or_parent_matches(self, file: str) -> bool:
        matched = False
        parent = go_dir(file)
        parent_dirs = parent.split("/")
        for pattern in self.patterns:
            if pattern.exclusion != matched:
                continue  # only a later exclusion can undo a match, only an inclusion make one
            match = pattern.match(file)
            if not match and parent != ".":
                match = any(
                    pattern.match("/".join(parent_dirs[: i + 1])) for i in range(len(parent_dirs))
                )
            if match:
                matched = not pattern.exclusion
        return matched


def tracked_files(repo: Path) -> list[str]:
    """``git ls-files``: what a clean clone holds (the context of a ``docker build`` in CI)."""
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True, timeout=30
    ).stdout
    return sorted(f for f in out.decode().split("\0") if f)


def context_files(repo: Path) -> list[str]:
    """The tracked files ``docker build`` would send from ``repo`` with its .dockerignore;
    raises ValueError when an ignore file that takes precedence exists."""
    for name in OTHER_IGNORE_FILES:
        if (repo / name).exists():
            raise ValueError(
                f"{name} exists: for `docker build -f {CONTAINERFILE} .` BuildKit (and "
                "podman/buildah, for .containerignore) reads it instead of .dockerignore, and "
                "tests/dockerignore.py models only .dockerignore: merge it into .dockerignore "
                "(or model the precedence in tests/dockerignore.py)"
            )
    ignore = repo / ".dockerignore"
    patterns = read_ignore_file(ignore.read_text()) if ignore.exists() else []
    matcher = PatternMatcher(patterns)
    return [f for f in tracked_files(repo) if not matcher.matches_or_parent_matches(f)]


def copy_context(repo: Path, dest: Path) -> list[str]:
    """Copy the build context of ``repo`` to ``dest`` (the image's ``COPY . /src/numamem``)."""
    files = context_files(repo)
    for name in files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    return files
