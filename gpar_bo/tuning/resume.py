"""Open the experiment of an output directory: new, resumed, recovered or replaced.

* No snapshot and no progress files: a new experiment.
* A snapshot of the same problem: resumed (then reconciled with ``runs/`` by
  :func:`gpar_bo.tuning.recovery.reconcile`).
* A snapshot of another problem: refused, unless no trial in it ever reported an
  epoch (e.g. every job failed on a bad data directory); then the old files are
  moved aside to ``OUT/replaced-<time>/`` and a new experiment starts.
* A damaged or missing snapshot beside progress files: a clear error that names
  the file and the damage; with ``recover=True`` (``--recover``) the damaged file is
  kept as ``snapshot.json.damaged``, the last good copy ``snapshot.json.bak`` is
  resumed if it loads, else the experiment is rebuilt from ``runs/`` alone.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from ax.core.experiment import Experiment
from ax.generation_strategy.generation_strategy import GenerationStrategy

from gpar_bo.tuning.errors import TuneSettingsError
from gpar_bo.tuning.jobs import read_job
from gpar_bo.tuning.recovery import progress_files
from gpar_bo.tuning.report import REPORT_FILES
from gpar_bo.tuning.runner import CurveRunner
from gpar_bo.tuning.snapshot import POLICY_STATE, SNAPSHOT, SnapshotDamaged, backup_path, load_snapshot

__all__ = ["open_experiment"]

logger = logging.getLogger(__name__)

#: Files of a tuning run, moved aside together when a folder is reused.
_RUN_FILES = (SNAPSHOT, SNAPSHOT + ".bak", POLICY_STATE, "runs", *REPORT_FILES)


def _unused_name(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        candidate, n = path.with_name(f"{path.name}.{n}"), n + 1
    return candidate


def _same_problem(experiment: Experiment, name: str, runner: CurveRunner,
                  parameter_names: list[str]) -> bool:
    stored = experiment.runner
    return (experiment.name == name and isinstance(stored, CurveRunner)
            and stored.train == runner.train and stored.train_kwargs == runner.train_kwargs
            and getattr(stored, "checkpoints", None) == runner.checkpoints
            and list(experiment.search_space.parameters) == parameter_names)


def _any_epoch(experiment: Experiment, runs: Path) -> bool:
    if not experiment.lookup_data().full_df.empty:
        return True
    return any(read_job(path).steps for path in progress_files(runs).values())


def _move_aside(directory: Path) -> Path:
    target = _unused_name(directory / time.strftime("replaced-%Y%m%d-%H%M%S"))
    target.mkdir()
    for name in _RUN_FILES:
        if (directory / name).exists():
            os.replace(directory / name, target / name)
    return target


def _way_back(snapshot: Path, runs: Path) -> str:
    backup = backup_path(snapshot)
    try:
        good, _ = load_snapshot(backup)
        source = f"the last good copy {backup} ({len(good.trials)} trials)"
    except SnapshotDamaged:
        source = None
    files = len(progress_files(runs))
    if source is None:
        return (f"Rerun with --recover (tune(..., recover=True)) to rebuild the experiment "
                f"from the {files} progress files in {runs}.")
    return (f"Rerun with --recover (tune(..., recover=True)) to resume from {source}; "
            f"trials it lacks are rebuilt from {runs} ({files} progress files).")


def open_experiment(
    directory: Path,
    name: str,
    parameter_names: list[str],
    runner: CurveRunner,
    new: Callable[[], tuple[Experiment, GenerationStrategy | None]],
    recover: bool = False,
) -> tuple[Experiment, GenerationStrategy | None]:
    """The experiment and generation strategy to run in ``directory``.

    Args:
        directory: The output directory (locked by the caller).
        name: The problem's experiment name.
        parameter_names: The problem's parameters, in order.
        runner: The fresh runner for this run (becomes the experiment's runner).
        new: Makes a new experiment and strategy for the problem.
        recover: Recover from a damaged or missing snapshot (see the module doc).

    Raises:
        SnapshotDamaged: The snapshot is damaged or missing (without ``recover``).
        TuneSettingsError: The directory holds another problem's trained trials.
    """
    snapshot, runs = directory / SNAPSHOT, Path(runner.directory)
    loaded: tuple[Experiment, GenerationStrategy | None] | None = None
    try:
        if snapshot.exists():
            loaded = load_snapshot(snapshot)
        elif backup_path(snapshot).exists() or progress_files(runs):
            raise SnapshotDamaged(f"{snapshot} is missing, but {directory} holds an earlier "
                                  "run's files.")
    except SnapshotDamaged as damage:
        if not recover:
            raise SnapshotDamaged(f"{damage} {_way_back(snapshot, runs)}") from damage
        if snapshot.exists():
            kept = _unused_name(snapshot.with_name(SNAPSHOT + ".damaged"))
            os.replace(snapshot, kept)
            logger.warning("%s Kept it as %s.", damage, kept)
        try:
            loaded = load_snapshot(backup_path(snapshot))
            logger.warning("Resuming from the last good copy %s (%d trials); later trials "
                           "are rebuilt from %s.", backup_path(snapshot),
                           len(loaded[0].trials), runs)
        except SnapshotDamaged as also:
            logger.warning("No usable copy (%s); rebuilding the experiment from %s.", also, runs)
            loaded = new()
    if loaded is None:
        return new()
    experiment, strategy = loaded
    if not _same_problem(experiment, name, runner, parameter_names):
        if _any_epoch(experiment, runs):
            stored = experiment.runner
            raise TuneSettingsError(
                f"{directory} holds another tuning experiment ({experiment.name!r}, job "
                f"settings {getattr(stored, 'train_kwargs', None)}, checkpoints "
                f"{getattr(stored, 'checkpoints', None) or 'every epoch'}) with trained epochs; "
                f"use another output directory to start {name!r} with {runner.train_kwargs}, "
                f"checkpoints {runner.checkpoints or 'every epoch'}."
            )
        moved = _move_aside(directory)
        logger.warning("%s held experiment %r whose %d trials trained no epoch; moved its "
                       "files to %s and starting afresh.", directory, experiment.name,
                       len(experiment.trials), moved)
        return new()
    # A fresh runner (same job) owns no jobs: reconcile settles the trials that ran.
    experiment.runner = runner
    logger.info("Resuming %s: %d trials so far.", snapshot, len(experiment.trials))
    return experiment, strategy
