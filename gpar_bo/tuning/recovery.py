"""Bring a resumed experiment in line with what its jobs actually did.

The snapshot records every trial before its job starts (write-ahead, see
:mod:`gpar_bo.tuning.loop`), and every job's progress file records its
configuration before it starts and each epoch as it is reported
(:mod:`gpar_bo.tuning.jobs`). After a crash, ``kill -9`` included, the progress
files are therefore the truth about what was trained, and :func:`reconcile` makes
the experiment agree with them before any new job starts:

* a trial that was not finished in the snapshot gets every epoch its job reported
  and its status: COMPLETED if it reported its final epoch, EARLY_STOPPED if it was
  stopped on purpose, RUNNING if its job is paused; a job that died with the tuning
  process (no status line) is recorded paused at its last reported epoch if it is
  resumable (it resumes from its last checkpoint), otherwise its trial is FAILED
  (interrupted). A job that may still be alive is asked to pause (resumable) or stop
  first, and a job on this host is waited for, so that no epoch arrives after the
  trial is settled;
* a progress file with no trial in the snapshot (possible only when the snapshot
  was restored from an older copy or rebuilt) becomes a trial again, from its
  header: its index, arm and parameters, its epochs and its status;
* a trial whose job never started (still CANDIDATE, no progress file) is left for
  the Orchestrator, which starts it: it never ran, so nothing is rerun.

No progress file is ever deleted, truncated or rewritten (a dead resumable job's
file gets its ``paused`` line appended); a new job never writes over one
(``CurveRunner.run`` refuses).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from ax.core.arm import Arm
from ax.core.base_trial import BaseTrial
from ax.core.data import Data
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus

from gpar_bo.tuning.errors import TuneError
from gpar_bo.tuning.jobs import (
    INTERRUPTED,
    JobRecord,
    append_status,
    read_job,
    write_verdict,
)
from gpar_bo.tuning.runner import CurveMetric, CurveRunner

__all__ = ["Reconciliation", "apply_status", "progress_files", "reconcile", "sync_trial_data"]

logger = logging.getLogger(__name__)

_PROGRESS_NAME = re.compile(r"trial_(\d+)\.jsonl")


@dataclass
class Reconciliation:
    """What :func:`reconcile` did, for the log and for tests.

    Attributes:
        settled: Trial index -> the status given to a trial that was unfinished.
        recreated: Indices of trials rebuilt from their progress files.
        placeholders: Indices with no usable progress file, filled by ABANDONED
            trials so that trial indices keep matching file names.
    """

    settled: dict[int, TrialStatus] = field(default_factory=dict)
    recreated: list[int] = field(default_factory=list)
    placeholders: list[int] = field(default_factory=list)


def progress_files(directory: str | Path) -> dict[int, Path]:
    """The progress files in a runs directory, by trial index."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        match = _PROGRESS_NAME.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a zombie does not)."""
    if pid <= 0:  # not a pid: os.kill would address a process group or every process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # An orphan nobody reaps stays a zombie: it no longer runs.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _settle_job(runner: CurveRunner, index: int, wait_seconds: float) -> JobRecord:
    """End trial ``index``'s job if it might still run (pause it if resumable, else
    stop it); record a dead resumable job paused; return its final record."""
    path = runner.progress_file(index)
    job = read_job(path)
    if job.status is not None:
        return job
    write_verdict(runner.verdict_file(index), None,
                  "pause" if job.resumable else "stop", INTERRUPTED)
    started = job.started or {}
    here = started.get("host") == socket.gethostname()
    if here and _alive(int(started.get("pid", -1))):
        logger.warning("Trial %d's job (pid %s) still runs; waiting up to %g s for it to "
                       "end after its current epoch.", index, started["pid"], wait_seconds)
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline and _alive(int(started["pid"])):
            if read_job(path).status is not None:
                break
            time.sleep(0.1)
        else:
            if _alive(int(started["pid"])):
                logger.warning("Trial %d's job (pid %s) is still running; epochs it reports "
                               "from now on are added when this run ends.", index,
                               started["pid"])
    elif started and not here:
        logger.warning("Trial %d's job ran on %s; it was asked to stop, and epochs it reports "
                       "from now on are added when this run ends.", index, started.get("host"))
    job = read_job(path)
    dead = not started or (here and not _alive(int(started.get("pid", -1))))
    if job.status is None and job.resumable and dead:
        # Its checkpoint holds every epoch it reported (saved before each report): it
        # resumes from there. (Or never started: it resumes from scratch.)
        append_status(path, {"status": "paused", "step": job.last_step, "reason": INTERRUPTED})
        logger.info("Trial %d's job died with the tuning process; paused at epoch %s, "
                    "it resumes from its checkpoint.", index, job.last_step)
        job = read_job(path)
    return job


def sync_trial_data(experiment: Experiment, trials: list[BaseTrial] | None = None) -> int:
    """Attach every epoch the trials' progress files report (all trials by default).

    Ax fetches data only for trials it expects data from, so epochs a job reported
    after its last fetch (a FAILED trial, a stop that arrived during an epoch)
    would be lost without this. Returns the number of trials with data.
    """
    batches = []
    for trial in trials if trials is not None else list(experiment.trials.values()):
        if "progress_file" not in trial.run_metadata or not trial.arms:
            continue
        for metric in experiment.metrics.values():
            if isinstance(metric, CurveMetric):
                result = metric.fetch_trial_data(trial)
                if result.is_ok():
                    batches.append(result.unwrap())
    if batches:
        experiment.attach_data(Data.from_multiple_data(batches))
    return len({int(i) for batch in batches for i in batch.trial_indices})


def apply_status(trial: BaseTrial, status: TrialStatus, reason: str) -> None:
    """Give an unfinished trial its final ``status`` (RUNNING leaves it running)."""
    if trial.status in (TrialStatus.CANDIDATE, TrialStatus.STAGED):
        trial.mark_running(no_runner_required=True, unsafe=True)
    if status == TrialStatus.COMPLETED:
        trial.mark_completed()
    elif status == TrialStatus.EARLY_STOPPED:
        trial.mark_early_stopped(reason=reason)
    elif status == TrialStatus.FAILED:
        trial.mark_failed(reason=reason)


def _check_header(runner: CurveRunner, path: Path, job: JobRecord,
                  trial: BaseTrial | None) -> None:
    header = job.header
    if header is None:
        return
    if (header.get("train") != runner.train or header.get("train_kwargs") != runner.train_kwargs
            or header.get("checkpoints") != runner.checkpoints):
        raise TuneError(
            f"{path} was written by another tuning job ({header.get('train')} with "
            f"{header.get('train_kwargs')}, checkpoints {header.get('checkpoints')}), not this "
            f"one ({runner.train} with {runner.train_kwargs}, checkpoints "
            f"{runner.checkpoints}); move it away or use another output directory."
        )
    if trial is not None and trial.arms and header.get("parameters") != trial.arms[0].parameters:
        raise TuneError(
            f"{path} records parameters {header.get('parameters')} but the snapshot's trial "
            f"{trial.index} has {trial.arms[0].parameters}: the snapshot and runs/ belong to "
            "different experiments."
        )


def reconcile(experiment: Experiment, runner: CurveRunner,
              wait_seconds: float = 30.0) -> Reconciliation:
    """Make ``experiment`` agree with the progress files in ``runner.directory``.

    Args:
        experiment: The experiment as loaded (or rebuilt); its runner must be a
            fresh ``runner`` that owns no jobs.
        runner: That runner.
        wait_seconds: How long to wait for a job of this host that is still alive.

    Returns:
        What was done (see :class:`Reconciliation`).

    Raises:
        TuneError: A progress file belongs to another job or contradicts the snapshot.
    """
    done = Reconciliation()
    files = progress_files(runner.directory)

    unchanged: list[int] = []  # paused before, paused now: nothing to report

    def settle(trial: BaseTrial) -> None:
        was_paused = read_job(runner.progress_file(trial.index)).paused
        job = _settle_job(runner, trial.index, wait_seconds)
        trial.update_run_metadata({"progress_file": str(runner.progress_file(trial.index)),
                                   "verdict_file": str(runner.verdict_file(trial.index))})
        # The runner's own rule (final line, or final step reached) decides the status;
        # it owns no jobs, so a job without a final line reads as interrupted.
        (status, _), = runner.poll_trial_status([trial]).items()
        if status == TrialStatus.EARLY_STOPPED and not job.steps:
            status = TrialStatus.FAILED  # Ax keeps no early-stopped trial without data
        # Its epochs first: Ax refuses some statuses to a trial without data.
        sync_trial_data(experiment, [trial])
        apply_status(trial, status, runner.poll_exception(trial) if status != TrialStatus.COMPLETED
               else "")
        done.settled[trial.index] = status
        if was_paused and status == TrialStatus.RUNNING:
            unchanged.append(trial.index)
        if not job.steps and status == TrialStatus.FAILED:
            logger.info("Trial %d was interrupted before its first epoch.", trial.index)

    for index in sorted(experiment.trials):
        trial = experiment.trials[index]
        if index in files:
            _check_header(runner, files[index], read_job(files[index]), trial)
        if trial.status.is_terminal:
            continue
        if index not in files and trial.status == TrialStatus.CANDIDATE:
            continue  # never started: the Orchestrator starts it
        settle(trial)

    extra = sorted(i for i in files if i not in experiment.trials)
    next_index = max(experiment.trials, default=-1) + 1
    for index in range(next_index, (extra[-1] + 1) if extra else next_index):
        job = read_job(files[index]) if index in files else JobRecord()
        trial = experiment.new_trial()
        if trial.index != index:  # Ax numbers trials consecutively; a guard all the same
            raise TuneError(f"Cannot rebuild trial {index} from runs/: Ax numbered it "
                            f"{trial.index}.")
        if job.header is None:
            why = ("no progress file" if index not in files else
                   f"{files[index]} has no header line (written by an older gpar-bo)")
            trial.mark_abandoned(reason=f"Not recoverable from runs/: {why}.", unsafe=True)
            done.placeholders.append(index)
            logger.warning("Trial %d cannot be rebuilt (%s); recorded as ABANDONED, and %d "
                           "reported epochs of it are left out.", index, why,
                           len(job.steps))
            continue
        _check_header(runner, files[index], job, None)
        trial.add_arm(Arm(parameters=dict(job.header["parameters"]),
                          name=job.header.get("arm")))
        settle(trial)
        done.recreated.append(index)
    sync_trial_data(experiment, [experiment.trials[i] for i in sorted(files)
                                 if i in experiment.trials])
    recovered = {i: s for i, s in done.settled.items()
                 if i not in unchanged or i in done.recreated}
    if recovered:
        logger.warning("Recovered from runs/: %s.", ", ".join(
            f"trial {i} {s.name}{' (rebuilt)' if i in done.recreated else ''}"
            for i, s in sorted(recovered.items())))
    if unchanged:
        logger.info("%d paused trials stay paused: %s.", len(unchanged), sorted(unchanged))
    return done
