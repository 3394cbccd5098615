""".dockerignore: the build context holds what the Dockerfile copies and nothing else.

The matcher follows moby/patternmatcher, which BuildKit uses: patterns are cleaned paths, `*`
and `?` stay inside one path segment, `**` spans segments, a pattern that matches a parent
directory matches everything below it, `!` re-includes, and the last matching pattern wins.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    exclusion: bool  # a `!` pattern: re-include
    text: str


def _to_regex(pattern: str) -> re.Pattern[str]:
    out = "^"
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # `**/` matches zero or more directories
                i += 1
                out += "(.*/)?"
            else:
                out += ".*"
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + "$")


def load_patterns(text: str) -> list[Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        body = line[1:].strip() if exclusion else line
        body = posixpath.normpath(body).lstrip("/")
        patterns.append(Pattern(_to_regex(body), exclusion, line))
    return patterns


def excluded(path: str, patterns: list[Pattern]) -> bool:
    """Whether `path` (relative, `/`-separated) is left out of the build context."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    matched = False
    for p in patterns:
        if any(p.regex.match(c) for c in candidates):
            matched = not p.exclusion
    return matched


@pytest.fixture(scope="module")
def patterns(repo: Path) -> list[Pattern]:
    return load_patterns((repo / ".dockerignore").read_text())


def test_matcher_follows_docker_rules() -> None:
    """The matcher itself, on the documented examples (so a wrong matcher cannot pass the rest)."""
    ps = load_patterns("*/temp*\n*/*/temp*\ntemp?\n**/*.go\n!keep.go\ndocs\n!docs/README.md\n")
    assert excluded("somedir/temporary.txt", ps)
    assert excluded("somedir/subdir/temp", ps)
    assert excluded("tempa", ps) and not excluded("tempab", ps)
    assert excluded("a/b/c.go", ps) and excluded("c.go", ps) and not excluded("keep.go", ps)
    assert excluded("docs/x/y.md", ps) and not excluded("docs/README.md", ps)
    assert not excluded("src/main.py", ps)


def _context_files(repo: Path, patterns: list[Pattern]) -> list[str]:
    """Files BuildKit would send, walking the working tree and pruning excluded directories."""
    reincluded = [p.text[1:].lstrip("/") for p in patterns if p.exclusion]
    files = []
    for root, dirs, names in os.walk(repo):
        rel_root = os.path.relpath(root, repo)
        rel_root = "" if rel_root == "." else rel_root
        keep = []
        for d in dirs:
            rel = f"{rel_root}/{d}" if rel_root else d
            # Docker walks into an excluded directory only if a `!` pattern could match below it.
            if not excluded(rel, patterns) or any(r.startswith(rel + "/") or r == rel for r in reincluded):
                keep.append(d)
        dirs[:] = keep
        for name in names:
            rel = f"{rel_root}/{name}" if rel_root else name
            if not excluded(rel, patterns):
                files.append(rel)
    return sorted(files)


def test_heavy_and_private_paths_stay_out(patterns: list[Pattern]) -> None:
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/image/test_dockerignore.py",
        "sdk/trainctl/job.py",
        "docs/image.md",
        "bench/results.json",
        "examples/data/train.jsonl",
        "runs/x/checkpoint.pt",
        "output/metrics.jsonl",
        ".github/workflows/image.yml",
        "Dockerfile",
        "trainer_image/trainer/__pycache__/launch.cpython-311.pyc",
        "trainer_image/trainer/launch.pyc",
        ".mypy_cache/x",
        "trainer_image/.pytest_cache/v",
    ):
        assert excluded(path, patterns), f"{path} should not be in the build context"


def test_what_the_dockerfile_copies_stays_in(
    patterns: list[Pattern], dockerfile: Any, repo: Path, cpu_args: dict[str, str]
) -> None:
    """In both flavors (the cpu flavor COPYs its own lock)."""
    sources = []
    for flavor in (dockerfile, dockerfile.with_args(cpu_args)):
        for stage in flavor.stages:
            for copy in stage.values("COPY"):
                if copy.startswith("--from="):
                    continue
                sources += [flavor.expand(src) for src in copy.split()[:-1]]
    assert sources
    for src in sources:
        assert not excluded(src, patterns), f"COPY {src} would find nothing: .dockerignore excludes it"
        path = repo / src
        assert path.exists(), f"COPY {src}: no such path"
        if path.is_dir():
            inner = [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
            assert inner and all(not excluded(str(p.relative_to(repo)), patterns) for p in inner)


def test_build_context_is_small(repo: Path, patterns: list[Pattern]) -> None:
    files = _context_files(repo, patterns)
    assert "Dockerfile" not in files and ".dockerignore" not in files
    assert all(f.startswith("trainer_image/") for f in files), [f for f in files if "trainer_image" not in f]
    size = sum((repo / f).stat().st_size for f in files)
    assert size < 5 * 1024 * 1024, f"build context is {size} bytes"
