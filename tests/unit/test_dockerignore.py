"""tests/dockerignore.py against Docker's own rules: cases of moby/patternmatcher's test table
(``TestMatches``/``MatchesOrParentMatches``) and of ``ignorefile.ReadAll``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.dockerignore import (
    OTHER_IGNORE_FILES,
    PatternMatcher,
    context_files,
    go_clean,
    read_ignore_file,
)

MOBY_CASES = [
    ("**", "file", True),
    ("**", "file/", True),
    ("**/", "file", True),
    ("**/", "file/", True),
    ("**", "/", True),
    ("**/", "/", True),
    ("**", "dir/file", True),
    ("**/", "dir/file", True),
    ("**", "dir/file/", True),
    ("**/", "dir/file/", True),
    ("**/**", "dir/file", True),
    ("**/**", "dir/file/", True),
    ("dir/**", "dir/file", True),
    ("dir/**", "dir/file/", True),
    ("dir/**", "dir/dir2/file", True),
    ("dir/**", "dir/dir2/file/", True),
    ("**/dir", "dir", True),
    ("**/dir", "dir/file", True),
    ("**/dir2/*", "dir/dir2/file", True),
    ("**/dir2/*", "dir/dir2/file/", True),
    ("**/dir2/**", "dir/dir2/dir3/file", True),
    ("**/dir2/**", "dir/dir2/dir3/file/", True),
    ("**file", "file", True),
    ("**file", "dir/file", True),
    ("**/file", "dir/file", True),
    ("**file", "dir/dir/file", True),
    ("**/file", "dir/dir/file", True),
    ("**/file*", "dir/dir/file", True),
    ("**/file*", "dir/dir/file.txt", True),
    ("**/file*txt", "dir/dir/file.txt", True),
    ("**/file*.txt", "dir/dir/file.txt", True),
    ("**/file*.txt*", "dir/dir/file.txt", True),
    ("**/**/*.txt", "dir/dir/file.txt", True),
    ("**/**/*.txt2", "dir/dir/file.txt", False),
    ("**/*.txt", "file.txt", True),
    ("**/**/*.txt", "file.txt", True),
    ("a**/*.txt", "a/file.txt", True),
    ("a**/*.txt", "a/dir/file.txt", True),
    ("a**/*.txt", "a/dir/dir/file.txt", True),
    ("a/*.txt", "a/dir/file.txt", False),
    ("a/*.txt", "a/file.txt", True),
    ("a/*.txt**", "a/file.txt", True),
    ("a[b-d]e", "ae", False),
    ("a[b-d]e", "ace", True),
    ("a[b-d]e", "aae", False),
    ("a[^b-d]e", "aze", True),
    (".*", ".foo", True),
    (".*", "foo", False),
    ("abc.def", "abcdef", False),
    ("abc.def", "abc.def", True),
    ("abc.def", "abcZdef", False),
    ("abc?def", "abcZdef", True),
    ("abc?def", "abcdef", False),
    ("a\\\\", "a\\", True),
    ("a\\*b", "a*b", True),
    ("a\\*b", "azb", False),
    ("a\\", "a", False),
    ("**/foo/bar", "foo/bar", True),
    ("**/foo/bar", "dir/foo/bar", True),
    ("**/foo/bar", "dir/dir2/foo/bar", True),
    ("abc/**", "abc", False),
    ("abc/**", "abc/def", True),
    ("abc/**", "abc/def/ghi", True),
    ("**/.foo", ".foo", True),
    ("**/.foo", "bar.foo", False),
    ("a(b)c/def", "a(b)c/def", True),
    ("a(b)c/def", "a(b)c/xyz", False),
    ("a.|)$(}+{bc", "a.|)$(}+{bc", True),
    ("dist/*.whl", "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", True),
    # MatchesOrParentMatches: a pattern that matches a parent directory excludes its files.
    ("dir", "dir/file", True),
    ("dir/sub", "dir/sub/deep/file", True),
    ("*", "dir/file", True),
    ("*.py", "dir/file.py", False),  # "*" stops at "/": only top-level .py files
    ("src/numamem/v1/*_pb2*.py", "src/numamem/v1/common_pb2.py", True),
    ("src/numamem/v1/*_pb2*.py", "src/numamem/v1/common_pb2_grpc.py", True),
    ("src/numamem/v1/*_pb2*.py", "src/numamem/v1/__init__.py", False),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), MOBY_CASES)
def test_moby_patternmatcher_cases(pattern: str, path: str, expected: bool) -> None:
    assert PatternMatcher([pattern]).matches_or_parent_matches(path) is expected


def test_exceptions_and_last_match_wins() -> None:
    matcher = PatternMatcher(["docs", "!docs/README.md", "*.md", "!README.md"])
    assert matcher.matches_or_parent_matches("docs/guide.txt")
    assert not matcher.matches_or_parent_matches("docs/README.md")  # re-included by "!"
    assert matcher.matches_or_parent_matches("CHANGES.md")
    assert not matcher.matches_or_parent_matches("README.md")
    # A later inclusion excludes again what an exception re-included.
    assert PatternMatcher(["a", "!a/b", "a/b"]).matches_or_parent_matches("a/b")
    with pytest.raises(ValueError, match="illegal exclusion"):
        PatternMatcher(["!"])


def test_ignore_file_syntax() -> None:
    text = "\ufeff# comment\n  # not a comment: trimmed after the check\n/build/\n./dist\n! keep \n\n  x//y/../z  \n"
    assert read_ignore_file(text) == [
        "# not a comment: trimmed after the check",
        "build",
        "dist",
        "!keep",
        "x/z",
    ]


@pytest.mark.parametrize(
    ("path", "cleaned"),
    [
        ("", "."),
        ("a//b", "a/b"),
        ("a/./b/", "a/b"),
        ("../a/..", ".."),
        ("/../a", "/a"),
        ("//a", "/a"),
        ("a/b/../../..", ".."),
    ],
)
def test_go_clean(path: str, cleaned: str) -> None:
    assert go_clean(path) == cleaned


# Where Python's re reads moby's regexps differently from Go's RE2.
RE2_CASES = [
    ("*.txt", "a.txt\n", False),  # Python's $ matches before a final newline, RE2's does not
    ("*.txt", "a.txt", True),
    ("x/**/y", "x/a\nb/y", False),  # RE2's "." does not match a newline (re.S made it)
    ("x/**/y", "x/a/b/y", True),
    ("a?c", "a\nc", True),  # "?" is [^/], which matches a newline in RE2 too
    ("a*c", "a\nc", True),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), RE2_CASES)
def test_regexps_match_as_re2_does(pattern: str, path: str, expected: bool) -> None:
    assert PatternMatcher([pattern]).matches_or_parent_matches(path) is expected


@pytest.mark.parametrize(
    ("pattern", "refusal"),
    [
        ("[[:digit:]]", "the POSIX class '[:digit:]' is RE2 syntax"),
        ("a[[:^space:]]b", "the POSIX class '[:^space:]'"),
        ("file\\d.txt", "the escape \\d means something else in Go's RE2"),
        ("\\w*", "the escape \\w"),
        ("a\\1", "the escape \\1"),
    ],
)
def test_re2_syntax_python_reads_differently_is_refused(pattern: str, refusal: str) -> None:
    with pytest.raises(ValueError) as refused:
        PatternMatcher([pattern])
    assert refusal in str(refused.value) and repr(pattern) in str(refused.value)
    assert "write the" in str(refused.value)


@pytest.mark.parametrize("name", OTHER_IGNORE_FILES)
def test_an_ignore_file_that_takes_precedence_is_refused(tmp_path: Path, name: str) -> None:
    """BuildKit reads deploy/Containerfile.dockerignore, podman .containerignore, before
    .dockerignore: the context would not be what the port computes."""
    (tmp_path / ".dockerignore").write_text("dist\n")
    (tmp_path / "a.txt").write_text("a")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True, timeout=30)
    assert context_files(tmp_path) == [".dockerignore", "a.txt"]
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("")
    with pytest.raises(ValueError, match=f"{re.escape(name)} exists: .* reads it instead of"):
        context_files(tmp_path)
