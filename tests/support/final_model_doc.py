"""docs/trainer.md "The final model": its Python lines, run as written there in a fresh interpreter with
trainctl made unimportable (tests/trainer/test_final_model.py; tests/kubernetes/test_pull_k8s.py after a pull)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def doc_snippet() -> str:
    text = (ROOT / "docs" / "trainer.md").read_text()
    section = text[text.index("## The final model") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


def load_and_score(out: Path, val: Path, python: str, env: dict[str, str]) -> float:
    """The doc's lines in a fresh interpreter (in `out`'s parent, where "output/" is the run's folder), then the
    model's accuracy on `val`; importing trainctl there fails."""
    program = (
        "import sys\nsys.modules['trainctl'] = None  # any `import trainctl` raises ImportError\n"
        + doc_snippet()
        + "rows = [json.loads(line) for line in open(sys.argv[1])]\n"
        + "x = torch.tensor([r['x'] for r in rows]); y = torch.tensor([r['y'] for r in rows])\n"
        + "with torch.no_grad():\n    print((model(x).argmax(-1) == y).float().mean().item())\n"
    )
    (out.parent / "load.py").write_text(program)
    done = subprocess.run([python, "load.py", str(val)], cwd=out.parent, capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return float(done.stdout.split()[-1])
