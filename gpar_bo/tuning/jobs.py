"""Training jobs as run by the workers, and the progress-file protocol they write.

The runner creates a trial's progress file, exclusively (an existing file is never
overwritten), with a header line naming the trial and its configuration,
``{"trial": 3, "arm": "3_0", "parameters": {...}, "train": ..., "train_kwargs": {...}}``,
before it starts the job, so that the file alone says what ran. The job then
appends ``{"started": {"pid": ..., "host": ...}}`` and one JSON line per reported
step to its progress file, ``{"step": 3, "values": {"val_error": 0.12, ...}}``, then a
final ``{"status": "completed" | "stopped" | "failed", ...}`` line. Before each
step's report returns, the job checks for a stop file next to it; if present it
stops after that step, recording the file's text as the stop reason, unless that
step was the final one (``final_step``): a job that reported its final step
completed, whenever a stop arrived. Files work the same for local processes, a dask
``LocalCluster`` and any cluster whose workers share the filesystem, and they
survive a restart of the tuning process.

Training functions have the signature
``train(parameters, report, trial_index, **train_kwargs)``, where
``report(step, values) -> bool`` returns True when the job should stop; they are
named by import path (``"module:function"``) so that runners stay serialisable.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "JobRecord",
    "Report",
    "create_progress_file",
    "exit_with_parent",
    "read_job",
    "read_progress",
    "resolve",
    "run_training_job",
]

#: ``report(step, values)``: record one checkpoint; True means "stop now".
Report = Callable[[float, Mapping[str, float]], bool]


def exit_with_parent(parent_pid: int, poll_seconds: float = 1.0) -> None:
    """Worker initialiser: end this process when the tuning process is gone.

    A killed tuning process would otherwise leave its pool's workers behind for
    good; a job that was running is then reported FAILED when the loop resumes.
    """
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def resolve(path: str) -> Callable[..., Any]:
    """The function named ``"package.module:function"``."""
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"Expected 'module:function', got {path!r}.")
    return getattr(importlib.import_module(module), name)


def _append(path: Path, record: Mapping[str, Any]) -> None:
    # One write per line, flushed at once: readers see whole lines (or none).
    with open(path, "a") as file:
        file.write(json.dumps(record) + "\n")
        file.flush()
        os.fsync(file.fileno())


def create_progress_file(path: str | Path, header: Mapping[str, Any]) -> None:
    """Create a job's progress file with its header line, durably, before the job
    starts.

    Raises:
        FileExistsError: The file exists: it records an earlier job and is never
            overwritten.
    """
    with open(path, "x") as file:
        file.write(json.dumps(dict(header)) + "\n")
        file.flush()
        os.fsync(file.fileno())


@dataclass
class JobRecord:
    """What a progress file says.

    Attributes:
        header: The runner's header line (None for files from before headers).
        started: ``{"pid", "host"}`` of the process running the job, once started.
        steps: ``[(step, values), ...]`` in report order.
        status: The final status record, None while the job runs (or if it died).
    """

    header: dict | None = None
    started: dict | None = None
    steps: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    status: dict | None = None


def read_job(path: str | Path) -> JobRecord:
    """Read a progress file; a missing file reads as an empty record."""
    job = JobRecord()
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return job
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written right now, or cut short by a kill
        if "status" in record:
            job.status = record
        elif "trial" in record:
            job.header = record
        elif "started" in record:
            job.started = record["started"]
        elif "step" in record:
            job.steps.append((float(record["step"]), dict(record["values"])))
    return job


def read_progress(path: str | Path) -> tuple[list[tuple[float, dict[str, float]]], dict | None]:
    """The reported steps of a progress file and its final status record.

    Returns:
        ``[(step, values), ...]`` in report order, and the status record
        (``{"status": ...}``) or None while the job runs. A missing file reads as
        no steps and no status.
    """
    job = read_job(path)
    return job.steps, job.status


def run_training_job(
    train: str,
    train_kwargs: Mapping[str, Any],
    parameters: Mapping[str, Any],
    trial_index: int,
    progress_file: str,
    stop_file: str,
    final_step: float | None = None,
) -> str:
    """Run one training job, writing its progress file; returns the final status.

    ``final_step`` is the step of a full run (e.g. its last epoch), if known.
    """
    progress, stop = Path(progress_file), Path(stop_file)
    stopped = False
    # Who runs the job: a resumed tuning process waits for a job of its host that
    # is still alive before it settles the trial.
    _append(progress, {"started": {"pid": os.getpid(), "host": socket.gethostname()}})

    def report(step: float, values: Mapping[str, float]) -> bool:
        nonlocal stopped
        _append(progress, {"step": step, "values": {k: float(v) for k, v in values.items()}})
        finished = final_step is not None and step >= final_step
        stopped = stop.exists() and not finished
        return stopped

    try:
        resolve(train)(dict(parameters), report, trial_index, **train_kwargs)
    except BaseException as error:
        _append(progress, {"status": "failed", "error": "".join(
            traceback.format_exception_only(type(error), error)).strip()})
        raise
    if stopped:
        _append(progress, {"status": "stopped", "reason": stop.read_text()})
        return "stopped"
    _append(progress, {"status": "completed"})
    return "completed"
