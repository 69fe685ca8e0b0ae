"""The README's model snippet and the BoTorch example run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_model_snippet_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## GPAR as a BoTorch model", 1)[1].split("\n## ", 1)[0]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    assert namespace["final"].shape == (128, 8, 1)


def test_botorch_loop_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "botorch_loop.py"), "--iterations", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "iteration 0" in result.stdout
