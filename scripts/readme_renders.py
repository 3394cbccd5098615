"""Rewrite the README's rendered examples with what the program prints now.

Each `<details><summary><code>trainctl render FILE --target T</code></summary>` block gets that render's text;
tests/sdk/test_readme_renders.py checks they agree. Run: .venv/bin/python scripts/readme_renders.py
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from trainctl import Job

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<details><summary><code>(trainctl render [^<]+)</code></summary>\n\n```\w*\n)(.*?)(```)", re.S)


def _rendered(match: re.Match[str]) -> str:
    words = shlex.split(match.group(2))
    text = Job.from_yaml(ROOT / words[2]).render(words[words.index("--target") + 1]).text
    return match.group(1) + text + match.group(4)


def main() -> None:
    readme = ROOT / "README.md"
    readme.write_text(BLOCK.sub(_rendered, readme.read_text()))


if __name__ == "__main__":
    main()
