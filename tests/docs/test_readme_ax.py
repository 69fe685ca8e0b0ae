"""The README's "Use with Ax" snippets: they compile, import what exists, and the Client
loop runs (shortened to its Sobol phase; the full snippets are run by hand, see README)."""

from __future__ import annotations

import ast
import importlib
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snippets() -> list[str]:
    section = (ROOT / "README.md").read_text().split("## Use with Ax", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]  # up to the next section
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_snippets_compile_and_their_imports_exist() -> None:
    blocks = snippets()
    assert len(blocks) == 2  # the Client loop and the Orchestrator loop
    for block in blocks:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"


def test_client_snippet_runs_its_sobol_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client_loop = snippets()[0]
    assert "for _ in range(4):" in client_loop
    monkeypatch.chdir(tmp_path)
    # Two rounds of two trials: Sobol only, but every Client call of the loop runs.
    exec(compile(client_loop.replace("range(4)", "range(2)"), "README.md", "exec"),
         {"__name__": "readme"})
    assert os.path.getsize(tmp_path / "gpar_client.json") > 0
