"""Every python snippet in the README and docs/ is an example file, and every example runs.

A snippet is marked ``<!-- example: examples/NAME.py -->`` on the line before its block and
must be the end of that file (the file adds only its docstring), so the docs cannot drift
from code that CI runs.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def example_server() -> Iterator[subprocess.Popen]:
    """A process that runs each example in a child forked from it after the examples'
    shared imports (``tests/docs/example_server.py``): one per test worker."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.docs.example_server"], cwd=ROOT, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        start_new_session=True,  # so that a kill takes the examples' processes down too
        # One thread, as CI sets it: small GP fits are much slower on oversubscribed cores.
        # This checkout's package, not whichever one is installed.
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
    )
    yield server
    if server.poll() is None:
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


@pytest.mark.long
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs(example: str, tmp_path: Path, example_server: subprocess.Popen) -> None:
    if example_server.poll() is not None:
        pytest.fail(f"the example server ended ({example_server.returncode}) before {example}")
    log = tmp_path / "output.log"
    request = {"path": str(ROOT / "examples" / example), "argv": QUICK_ARGS.get(example, []),
               "cwd": str(tmp_path), "log": str(log)}
    example_server.stdin.write(json.dumps(request) + "\n")
    example_server.stdin.flush()
    ready, _, _ = select.select([example_server.stdout], [], [], 600)
    if not ready:
        os.killpg(example_server.pid, signal.SIGKILL)
        pytest.fail(f"{example} did not end within 600 s:\n" + log.read_text()[-3000:])
    status = example_server.stdout.readline()
    assert status.strip() == "0", f"{example} exited with {status.strip() or 'no status'}:\n" + (
        log.read_text()[-3000:] if log.exists() else "")
