"""Training jobs as run by the workers: the progress file, verdicts and checkpoints.

**Training functions** have the signature
``train(parameters, report, trial_index, **train_kwargs)``, where
``report(step, values) -> bool`` records one checkpoint and returns True when the job
must end now (stopped or paused); they are named by import path
(``"module:function"``) so that runners stay serialisable.

**Resumable jobs.** A training function that accepts a ``checkpoint_dir`` keyword is
resumable: the runner passes it a directory of its own (``runs/trial_<i>/``). At every
checkpoint the job saves its whole state there (weights, optimiser, scheduler, RNG
states, the epoch) *before* it calls ``report``, and at start it loads that state when
present and continues at the next epoch. :func:`save_checkpoint` and
:func:`load_checkpoint` do the saving atomically, and commit each checkpoint with its
report: a job killed between the two resumes from the checkpoint before and trains that
epoch again, so no reported epoch is lost and none is reported twice. Any other format
works as long as the job reads what it wrote, without that guarantee for a kill between
its save and its report. A job without ``checkpoint_dir`` can be stopped, not paused.

**The progress file** (``runs/trial_<i>.jsonl``) is created by the runner, exclusively
(an existing file is never overwritten), with a header line naming the trial and its
configuration, ``{"trial": 3, "arm": "3_0", "parameters": {...}, "train": ...,
"train_kwargs": {...}, "checkpoint_dir": ... | null}``, before the job starts, so that the
file alone says what ran. Each run of the job (the first and every resume) appends
``{"started": {"pid": ..., "host": ...}}`` and one line per reported step,
``{"step": 3, "values": {"val_error": 0.12, ...}}``, then one status line:
``{"status": "completed"}``, ``{"status": "stopped", "step": k, "reason": ...}``,
``{"status": "paused", "step": k}`` or ``{"status": "failed", "error": ...}`` (with
``"traceback"`` when the job raised an ``Exception``). A paused
job's file goes on after its resume: the latest ``started`` line opens a new run.

**Verdicts.** After each report but the final step's, the job waits for the tuner's
verdict for that step in its verdict file (``runs/trial_<i>.verdict``, replaced
atomically by the runner): ``{"step": k, "verdict": "continue" | "pause" | "stop",
"reason": ...}``. "continue" counts for the step it names; "stop" and "pause" count at
once, whatever step they name (a stop decided while the job trains takes effect at its
next report). If no verdict comes within ``verdict_timeout`` seconds the job pauses
(or, if it cannot pause, stops as interrupted), so a dead tuner never leaves a job
training unsupervised. With ``verdict_timeout=None`` the job does not wait: it reads
the verdict file once per report and trains on (for loops that give no verdicts, such
as Ax's own ``Orchestrator``). A job that reported its final step (``final_step``)
completed, whatever verdict arrived.

**Checkpoints.** Given the tuner's ``checkpoints`` (e.g. epochs 1, 3, 7, 14, 21 of 21),
a job records, checkpoints and waits for verdicts at those steps only: a report at
another step returns False at once and records nothing, and the state saved after it is
committed at the next checkpoint (a kill in between resumes from the last checkpoint).

Files work the same for local processes, a dask ``LocalCluster`` and any cluster whose
workers share the filesystem, and they survive a restart of the tuning process.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
import os
import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpar_bo.tuning.atomic import atomic_rename, atomic_write_bytes, atomic_write_text

__all__ = [
    "STAGED_CHECKPOINT",
    "DEFAULT_VERDICT_TIMEOUT",
    "INTERRUPTED",
    "JobRecord",
    "Report",
    "VERDICTS",
    "accepts_checkpoint_dir",
    "append_status",
    "create_progress_file",
    "exit_with_parent",
    "is_interrupted",
    "load_checkpoint",
    "read_job",
    "read_progress",
    "read_verdict",
    "resolve",
    "run_training_job",
    "save_checkpoint",
    "write_verdict",
]

#: ``report(step, values)``: record one checkpoint; True means "end the job now".
Report = Callable[[float, Mapping[str, float]], bool]

#: The verdicts a tuner gives a job waiting at a checkpoint.
VERDICTS = ("continue", "pause", "stop")

#: Seconds a job waits for a verdict before it pauses: long enough for a GP fit and an
#: acquisition between two polls, short enough that a dead tuner costs one idle wait.
DEFAULT_VERDICT_TIMEOUT = 300.0

#: Stop reason of jobs stopped because the tuning process ended or lost them; such
#: trials are FAILED (interrupted), not EARLY_STOPPED. Reasons that start with
#: "interrupted" all mean that (see :func:`is_interrupted`).
INTERRUPTED = "interrupted: the tuning process stopped or lost this job"

#: The file :func:`save_checkpoint` writes in a job's checkpoint directory. The job's
#: next report commits it as ``checkpoint-<step>.pt`` (see :func:`load_checkpoint`).
STAGED_CHECKPOINT = "checkpoint.staged.pt"
_COMMITTED = "checkpoint-{}.pt"

#: The progress file of the job running in this thread (set by :func:`run_training_job`).
_PROGRESS_FILE: ContextVar[Path | None] = ContextVar("gpar_bo_progress_file", default=None)


def is_interrupted(reason: str | None) -> bool:
    """Whether a stop reason says the job was interrupted, not stopped on purpose."""
    return bool(reason) and str(reason).startswith("interrupted")


def exit_with_parent(tuning_pid: int, poll_seconds: float = 1.0) -> None:
    """Worker initialiser: end this process when the tuning process ``tuning_pid`` is gone.

    A killed tuning process would otherwise leave its pool's workers behind for
    good (a fork server's workers keep the server alive, and it them); a job that
    was running then resumes from its last checkpoint (resumable jobs) or is
    reported FAILED (others) when the loop resumes.
    """
    import threading

    def alive() -> bool:
        try:
            os.kill(tuning_pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            return False
        except PermissionError:  # it exists, owned by someone else
            pass
        return True

    def watch() -> None:
        while alive():
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def resolve(path: str) -> Callable[..., Any]:
    """The function named ``"package.module:function"``."""
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"Expected 'module:function', got {path!r}.")
    return getattr(importlib.import_module(module), name)


def accepts_checkpoint_dir(function: Callable[..., Any]) -> bool:
    """Whether a training function takes a ``checkpoint_dir`` keyword (is resumable)."""
    parameters = inspect.signature(function).parameters
    return "checkpoint_dir" in parameters and parameters["checkpoint_dir"].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


# ------------------------------------------------------------------ checkpoints
def save_checkpoint(checkpoint_dir: str | Path, state: Mapping[str, Any]) -> None:
    """Save a job's state (tensors, ``state_dict``\\ s, numbers, lists, dicts) atomically.

    Call it at every checkpoint *before* ``report``: the state is staged, and the
    report commits it together with the step (see :func:`load_checkpoint`). A job
    killed at any moment leaves whole files, never a partial one.
    """
    import torch

    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(checkpoint_dir) / STAGED_CHECKPOINT, buffer.getvalue())


def _committed_checkpoints(directory: Path) -> dict[float, Path]:
    """Step -> file of the checkpoints committed in ``directory``."""
    prefix, suffix = _COMMITTED.split("{}")
    found = {}
    for path in directory.glob(_COMMITTED.format("*")):
        try:
            found[float(path.name[len(prefix):-len(suffix)])] = path
        except ValueError:
            continue
    return found


def _commit_checkpoint(checkpoint_dir: str | None, step: float) -> None:
    """Give the staged checkpoint (if any) the step it was saved for. The step is
    committed, with this checkpoint, once its line is in the progress file."""
    if checkpoint_dir is None:
        return
    staged = Path(checkpoint_dir) / STAGED_CHECKPOINT
    if staged.exists():
        atomic_rename(staged, Path(checkpoint_dir) / _COMMITTED.format(repr(float(step))))


def _drop_other_checkpoints(checkpoint_dir: str | None, step: float) -> None:
    """Delete the committed checkpoints of other steps (``step`` is committed now)."""
    if checkpoint_dir is not None:
        for saved, path in _committed_checkpoints(Path(checkpoint_dir)).items():
            if saved != float(step):
                path.unlink(missing_ok=True)


def load_checkpoint(checkpoint_dir: str | Path | None) -> dict[str, Any] | None:
    """The state to resume from, or None (no directory, or nothing to resume).

    In a job run by :func:`run_training_job`: the checkpoint of the latest step in
    its progress file. A checkpoint saved but not reported (the job was killed in
    between) is not used: the job resumes from the one before and trains that epoch
    again, so no reported epoch is lost and none is reported twice. Elsewhere: the
    state :func:`save_checkpoint` saved last.
    """
    import torch

    if checkpoint_dir is None:
        return None
    directory = Path(checkpoint_dir)
    committed = _committed_checkpoints(directory)
    progress = _PROGRESS_FILE.get()
    if progress is None:
        staged = directory / STAGED_CHECKPOINT
        path = staged if staged.exists() else committed[max(committed)] if committed else None
    else:
        reported = {step for step, _ in read_job(progress).steps}
        resumable = [step for step in committed if step in reported]
        path = committed[max(resumable)] if resumable else None
    if path is None:
        return None
    # weights_only: a checkpoint holds tensors and plain containers, never code.
    return torch.load(path, map_location="cpu", weights_only=True)


# --------------------------------------------------------------- progress file
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


def append_status(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append a status line for a job that no longer runs (the runner settling it)."""
    _append(Path(path), record)


@dataclass
class JobRecord:
    """What a progress file says.

    Attributes:
        header: The runner's header line (None for files from before headers).
        started: ``{"pid", "host"}`` of the process running (or that last ran) the job.
        steps: ``[(step, values), ...]`` in report order, over all runs of the job.
        status: The status record of the latest run, None while it runs (or if it
            died); a paused job that was resumed runs again (None).
        runs: How many times the job was started (1 + resumes).
        run_steps: Steps reported by the latest run.
        pauses: The step of each pause, in order (a job paused before its first
            report, e.g. one that died then, starts again from scratch: no pause).
        resumes: The step of each pause after which a new run started (every pause
            but one the job is still in, or was stopped in).
    """

    header: dict | None = None
    started: dict | None = None
    steps: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    status: dict | None = None
    runs: int = 0
    run_steps: int = 0
    pauses: list[float] = field(default_factory=list)
    resumes: list[float] = field(default_factory=list)

    @property
    def last_step(self) -> float | None:
        """The latest step reported, or None."""
        return self.steps[-1][0] if self.steps else None

    @property
    def paused(self) -> bool:
        """Whether the job's latest run ended paused."""
        return self.status is not None and self.status.get("status") == "paused"

    @property
    def resumable(self) -> bool:
        """Whether the job was given a checkpoint directory (its header says so)."""
        return bool(self.header and self.header.get("checkpoint_dir"))


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
            if record["status"] == "paused" and record.get("step") is not None:
                job.pauses.append(float(record["step"]))
        elif "trial" in record:
            job.header = record
        elif "started" in record:
            if job.paused and job.status.get("step") is not None:
                job.resumes.append(float(job.status["step"]))
            job.started = record["started"]
            job.status, job.runs, job.run_steps = None, job.runs + 1, 0
        elif "step" in record:
            job.steps.append((float(record["step"]), dict(record["values"])))
            job.run_steps += 1
    return job


def read_progress(path: str | Path) -> tuple[list[tuple[float, dict[str, float]]], dict | None]:
    """The reported steps of a progress file and its latest status record.

    Returns:
        ``[(step, values), ...]`` in report order, and the status record
        (``{"status": ...}``) or None while the job runs. A missing file reads as
        no steps and no status.
    """
    job = read_job(path)
    return job.steps, job.status


# --------------------------------------------------------------------- verdicts
def write_verdict(path: str | Path, step: float | None, verdict: str,
                  reason: str | None = None) -> None:
    """Give a job its verdict, atomically (the job never reads half a verdict).

    Raises:
        ValueError: ``verdict`` is not one of :data:`VERDICTS`.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"A verdict is one of {VERDICTS}, not {verdict!r}.")
    atomic_write_text(path, json.dumps({"step": step, "verdict": verdict, "reason": reason}))


def read_verdict(path: str | Path) -> dict | None:
    """The verdict in a verdict file, or None if there is none."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _wait_for_verdict(path: Path, step: float, timeout: float | None) -> dict | None:
    """The verdict that applies after ``step``: a stop or pause at once, a continue for
    ``step`` or later; None if none came within ``timeout`` (or at once, without one)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.005
    while True:
        verdict = read_verdict(path)
        if verdict is not None and (
            verdict.get("verdict") in ("stop", "pause")
            or (verdict.get("step") is not None and float(verdict["step"]) >= step)
        ):
            return verdict
        if deadline is None:
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
        delay = min(delay * 2, 0.2)  # quick answers are seen quickly, idle waits are cheap


def run_training_job(
    train: str,
    train_kwargs: Mapping[str, Any],
    parameters: Mapping[str, Any],
    trial_index: int,
    progress_file: str,
    verdict_file: str,
    final_step: float | None = None,
    checkpoint_dir: str | None = None,
    verdict_timeout: float | None = None,
    checkpoints: Sequence[float] | None = None,
) -> str:
    """Run (or resume) one training job, writing its progress file.

    Args:
        train: The training function, ``"module:function"``.
        train_kwargs: Its keyword arguments.
        parameters: The trial's parameters.
        trial_index: The trial's index.
        progress_file: The progress file (created by the runner, with its header).
        verdict_file: Where the tuner's verdicts arrive.
        final_step: The step of a full run (e.g. its last epoch), if known: no
            verdict is awaited after it, and reporting it completes the job.
        checkpoint_dir: The job's checkpoint directory, passed to ``train`` as
            ``checkpoint_dir``; None for a job that cannot pause.
        verdict_timeout: Seconds to wait for each verdict before pausing; None to
            not wait (see the module doc).
        checkpoints: The steps the tuner records and decides at; a report at any
            other step is not recorded and the job trains on (see the module doc).
            None: every step.

    Returns:
        The final status: ``"completed"``, ``"stopped"`` or ``"paused"``.
    """
    progress, verdicts = Path(progress_file), Path(verdict_file)
    recorded = None if checkpoints is None else {float(c) for c in checkpoints}
    outcome: dict[str, Any] = {}
    # Who runs the job: a resumed tuning process waits for a job of its host that
    # is still alive before it settles the trial.
    _append(progress, {"started": {"pid": os.getpid(), "host": socket.gethostname()}})

    def report(step: float, values: Mapping[str, float]) -> bool:
        if outcome:
            return True  # the job was told to end and reports on: nothing more counts
        if recorded is not None and float(step) not in recorded:
            return False  # between checkpoints: its saved state is committed at the next
        _commit_checkpoint(checkpoint_dir, step)
        _append(progress, {"step": step, "values": {k: float(v) for k, v in values.items()}})
        _drop_other_checkpoints(checkpoint_dir, step)
        if final_step is not None and step >= final_step:
            return False  # a full run: it completes, whatever was decided meanwhile
        verdict = _wait_for_verdict(verdicts, step, verdict_timeout)
        if verdict is None and verdict_timeout is None:
            return False  # no verdict expected: train on
        if verdict is None:
            verdict = {"verdict": "pause", "reason":
                       f"interrupted: no verdict from the tuner within {verdict_timeout:g} s"}
        if verdict["verdict"] == "continue":
            return False
        if verdict["verdict"] == "pause" and checkpoint_dir is None:
            # The runner refuses to pause such a job; a timeout lands here.
            verdict = {"verdict": "stop", "reason": verdict.get("reason") or INTERRUPTED}
        outcome.update(verdict, step=step)
        return True

    call_kwargs = dict(train_kwargs)
    if checkpoint_dir is not None:
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        call_kwargs["checkpoint_dir"] = checkpoint_dir
    token = _PROGRESS_FILE.set(progress)
    try:
        resolve(train)(dict(parameters), report, trial_index, **call_kwargs)
    except BaseException as error:
        record = {"status": "failed", "error": "".join(
            traceback.format_exception_only(type(error), error)).strip()}
        if isinstance(error, Exception):  # the job's own error, not an interrupt or exit
            # From the job's frame on: this function's frame is not the user's concern.
            record["traceback"] = "".join(traceback.format_exception(
                type(error), error, error.__traceback__.tb_next)).rstrip()
        _append(progress, record)
        raise
    finally:
        _PROGRESS_FILE.reset(token)
    if outcome.get("verdict") == "pause":
        _append(progress, {"status": "paused", "step": outcome["step"],
                           "reason": outcome.get("reason")})
        return "paused"
    if outcome.get("verdict") == "stop":
        _append(progress, {"status": "stopped", "step": outcome["step"],
                           "reason": outcome.get("reason") or ""})
        return "stopped"
    _append(progress, {"status": "completed"})
    return "completed"
