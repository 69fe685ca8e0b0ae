"""Every python snippet in the README and docs/ is an example file, and every example runs.

A snippet is marked ``<!-- example: examples/NAME.py -->`` on the line before its block and
must be the end of that file (the file adds only its docstring), so the docs cannot drift
from code that CI runs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.fork_server import ForkServer

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SNIPPET = re.compile(r"(?:<!-- example: (\S+) -->\n)?```python\n(.*?)```", re.S)

#: Arguments that keep the examples with command-line options short; the others run as shown.
QUICK_ARGS = {"botorch_loop.py": ["--iterations", "1"]}
#: Run with tiny settings, and their output checked, by test_examples_section4.py.
RUN_ELSEWHERE = {"synthetic_dependencies.py", "noise_structure.py"}


def snippets() -> list[tuple[Path, str | None, str]]:
    return [(doc, name, body) for doc in DOCS for name, body in SNIPPET.findall(doc.read_text())]


@pytest.mark.parametrize("doc,name,body", snippets(), ids=lambda v: getattr(v, "name", None))
def test_snippet_is_an_example_file(doc: Path, name: str, body: str) -> None:
    assert name, f"{doc.name}: a python block without an '<!-- example: ... -->' line"
    assert (ROOT / name).read_text().endswith(body), f"{doc.name}: the block differs from {name}"


def test_the_docs_show_the_examples() -> None:
    shown = {name for _, name, _ in snippets()}
    assert {"examples/botorch_quickstart.py", "examples/ax_client_loop.py",
            "examples/ax_orchestrator_loop.py"} <= shown


EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if p.name not in RUN_ELSEWHERE)


@pytest.mark.long
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs(example: str, tmp_path: Path, fork_server: ForkServer) -> None:
    # Forked after the examples' shared imports (tests/fork_server.py), as each would
    # otherwise pay for them.
    log = tmp_path / "output.log"
    child = fork_server.start(path=ROOT / "examples" / example, argv=QUICK_ARGS.get(example, []),
                              cwd=tmp_path, log=log)
    try:
        status = child.wait(timeout=600)
    except subprocess.TimeoutExpired:
        child.kill_group()  # and the workers it started
        pytest.fail(f"{example} did not end within 600 s:\n" + child.output()[-3000:])
    assert status == 0, f"{example} exited with {status}:\n" + child.output()[-3000:]
