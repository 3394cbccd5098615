"""The README's rendered examples are the program's output (issue 27, finding 17): each
`<details><summary><code>trainctl render FILE --target T</code></summary>` block holds exactly what that command
prints (`scripts/readme_renders.py` rewrites them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from trainctl import Job

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<details><summary><code>(trainctl render [^<]+)</code></summary>\n\n```\w*\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    return BLOCK.findall((ROOT / "README.md").read_text())


def test_the_readme_has_render_blocks() -> None:
    assert {command.split("--target ")[1] for command, _ in blocks()} >= {"kubernetes", "sagemaker"}


@pytest.mark.parametrize(("command", "shown"), blocks(), ids=[c for c, _ in blocks()])
def test_each_readme_render_is_the_real_render(command: str, shown: str) -> None:
    words = shlex.split(command)
    job_file, target = words[2], words[words.index("--target") + 1]
    assert Job.from_yaml(ROOT / job_file).render(target).text == shown


def test_every_field_in_the_job_reference_says_what_it_is() -> None:
    """docs/job-reference.md (generated from the spec): no field row without a description."""
    from trainctl.cli.schema_doc import markdown

    rows = [line for line in markdown().splitlines() if line.startswith("| `")]
    bare = [row for row in rows if not row.rstrip(" |").split("|")[-1].strip()]
    assert rows and not bare, bare
