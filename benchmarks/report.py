"""Writing benchmark results: a markdown table, CSV, JSON and the run's provenance.

Every benchmark (``python -m benchmarks.jura``, ``benchmarks.exchange``, ...) records the
exact command, seeds, machine (``uname -a``, cores, torch threads), library
versions and date next to its numbers, so a committed result can be re-run.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import platform
import shlex
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import botorch
import gpytorch
import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def machine_info() -> dict[str, Any]:
    """The machine and software a result was measured on."""
    return {
        "uname": " ".join(platform.uname()),
        "nproc": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "botorch": botorch.__version__,
        "gpytorch": gpytorch.__version__,
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def command_line(argv: Sequence[str] | None) -> str:
    """The command that reproduces this run (relative to the repository root)."""
    script = Path(sys.argv[0]).resolve()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        module = ".".join(script.relative_to(REPO).with_suffix("").parts)
    except ValueError:  # not run from this checkout (e.g. under pytest)
        return shlex.join(["python", str(script), *args])
    return shlex.join(["python", "-m", module, *args])


def markdown_table(rows: Sequence[dict[str, Any]], digits: int = 4) -> str:
    """A GitHub markdown table of ``rows`` (the keys of the first row are the columns)."""
    columns = list(rows[0])

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.{digits}g}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_results(
    out_dir: Path,
    name: str,
    title: str,
    rows: Sequence[dict[str, Any]],
    command: str,
    seeds: Any,
    notes: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``name.md``, ``name.csv`` and ``name.json`` into ``out_dir``.

    Args:
        out_dir: The results directory (created if needed).
        name: File stem, e.g. "jura".
        title: The markdown heading.
        rows: One dict per table row, all with the same keys.
        command: The exact command that produced the results.
        seeds: The seeds used (any JSON-serialisable value).
        notes: Markdown placed under the table (protocol, paper numbers, caveats).
        extra: More JSON-serialisable data for the JSON file only.

    Returns:
        The written paths by suffix ("md", "csv", "json").
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    paths = {suffix: out_dir / f"{name}.{suffix}" for suffix in ("md", "csv", "json")}
    provenance = "\n".join(
        [
            f"- command: `{command}`",
            f"- seeds: {json.dumps(seeds)}",
            f"- machine: `{machine['uname']}`, nproc {machine['nproc']}, "
            f"torch threads {machine['torch_threads']}",
            f"- software: python {machine['python']}, torch {machine['torch']}, "
            f"botorch {machine['botorch']}, gpytorch {machine['gpytorch']}",
            f"- date: {machine['date_utc']}",
        ]
    )
    paths["md"].write_text(
        f"# {title}\n\n{markdown_table(rows)}\n\n{notes.strip()}\n\n## Provenance\n\n{provenance}\n"
    )
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    payload = {"rows": list(rows), "command": command, "seeds": seeds, "machine": machine}
    paths["json"].write_text(json.dumps({**payload, **(extra or {})}, indent=2, default=str))
    return paths


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold ``path`` (a runs file) for the block: a second process appending to it
    exits at once with a one-line error (``gpar_bo.tuning.lock.DirectoryLock``; a
    killed holder never blocks the next run)."""
    from gpar_bo.tuning.lock import DirectoryLock, DirectoryLocked

    lock = DirectoryLock(path.parent, name=f"{path.name}.lock", user=f"process writing {path.name}")
    try:
        lock.acquire()
    except DirectoryLocked as error:
        raise SystemExit(f"error: {error}") from None
    try:
        yield
    finally:
        lock.release()
