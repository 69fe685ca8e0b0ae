r"""The tuning loop: ``tune`` under an epoch budget, by freeze-thaw or early stopping.

``tune`` runs (or resumes) an experiment in one output directory with one of two
schedulers (``scheduler``):

* ``"freeze-thaw"`` (the default): the package's GPAR freeze-thaw policy decides,
  at every checkpoint of every run, which run trains on: it pauses and resumes runs
  and starts new settings (:mod:`gpar_bo.tuning.freeze_thaw`);
* ``"early-stopping"``: Ax's ``Orchestrator`` with Sobol then GPAR
  (``gpar_generation_strategy``) and ``GPAREarlyStoppingStrategy``, which only stops
  runs (this module).

Both keep the same files:

* ``tune.lock``: held for the whole run; a second process on the directory is
  refused at once (:mod:`gpar_bo.tuning.lock`);
* ``snapshot.json``: Ax's JSON encoding of the experiment and generation
  strategy, replaced atomically after every poll of the Orchestrator and, before
  any job starts, with the trials about to run (write-ahead); the previous one is
  kept as ``snapshot.json.bak`` (:mod:`gpar_bo.tuning.snapshot`);
* ``runs/``: the trials' progress files (:mod:`gpar_bo.tuning.jobs`), never
  overwritten;
* ``report.json``, ``report.png`` and ``report.html``: :mod:`gpar_bo.tuning.report`,
  refreshed as it runs.

Every setting and input is checked before anything starts
(:mod:`gpar_bo.tuning.checks`). If ``snapshot.json`` exists, the loop resumes it
(:mod:`gpar_bo.tuning.resume`) and first reconciles it with ``runs/``
(:mod:`gpar_bo.tuning.recovery`): trials that ran on after the last snapshot get all
their reported epochs and their status (a dead resumable job is paused at its last
checkpoint, a dead non-resumable one FAILED), and
generation goes on from the stored generation strategy. After ``kill -9`` at any
moment no trial is lost, rerun or overwritten.

With early stopping the budget counts epochs: no new trial starts once the epochs
trained plus those the running trials may still train, plus one full trial, would
exceed it. (Freeze-thaw commits one checkpoint at a time: see its module.)

Jobs wait at each checkpoint (every epoch by default) for their verdict
(:mod:`gpar_bo.tuning.jobs`). With early stopping the Orchestrator gives it at each poll
once early stopping has seen that epoch (:mod:`gpar_bo.tuning.orchestrator`): a stopped trial trains no epoch past the
checkpoint at which it was stopped. Resumable jobs pause when this process ends
(Ctrl-C, or no verdict within ``verdict_timeout`` after a crash) and are resumed
from their checkpoint by the next run.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ax.core.base_trial import BaseTrial
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus
from ax.early_stopping.strategies.base import BaseEarlyStoppingStrategy
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.orchestration.orchestrator import FailureRateExceededError, OrchestratorOptions

from gpar_bo.ax.early_stopping import GPAREarlyStoppingStrategy
from gpar_bo.ax.generation import gpar_generation_strategy
from gpar_bo.tuning.checks import (
    check_job,
    check_output_directory,
    check_scheduler,
    check_tune_options,
)
from gpar_bo.tuning.errors import TuneError, TuneSettingsError
from gpar_bo.tuning.jobs import DEFAULT_VERDICT_TIMEOUT
from gpar_bo.tuning.lock import DirectoryLock
from gpar_bo.tuning.orchestrator import VerdictOrchestrator
from gpar_bo.tuning.problem import TuningProblem
from gpar_bo.tuning.report import write_report
from gpar_bo.tuning.runner import CurveRunner
from gpar_bo.tuning.session import (
    SCHEDULERS,
    Progress,
    failed_trials,
    failure_cause,
    finish_run,
    make_runner,
    open_run,
    raise_job_error,
    trained_epochs_by_trial,
)
from gpar_bo.tuning.snapshot import SNAPSHOT, save_snapshot

__all__ = [
    "EpochBudget",
    "SCHEDULERS",
    "check_tune_options",
    "tune",
]

logger = logging.getLogger(__name__)


class EpochBudget(BaseGlobalStoppingStrategy):
    """Stop starting trials when another full trial could exceed an epoch budget.

    Args:
        budget: Total training epochs allowed.
        metric: The per-epoch metric whose steps count the epochs trained.
        epochs: Epochs of a full trial.
    """

    def __init__(self, budget: int, metric: str, epochs: int) -> None:
        super().__init__(min_trials=0, inactive_when_pending_trials=False)
        self.budget, self.metric, self.epochs = budget, metric, epochs

    def _trained_by_trial(self, experiment: Experiment) -> dict[int, int]:
        return trained_epochs_by_trial(experiment, self.metric)

    def trained(self, experiment: Experiment) -> int:
        """Epochs trained so far (as far as fetched data shows)."""
        return sum(self._trained_by_trial(experiment).values())

    def committed(self, experiment: Experiment) -> int:
        """Epochs trained, plus the rest of a full run for every running trial."""
        trained = self._trained_by_trial(experiment)
        return sum(
            self.epochs if trial.status == TrialStatus.RUNNING else trained.get(index, 0)
            for index, trial in experiment.trials.items()
        )

    def _should_stop_optimization(self, experiment: Experiment) -> tuple[bool, str]:
        committed = self.committed(experiment)
        if committed + self.epochs > self.budget:
            return True, f"Epoch budget: {committed} of {self.budget} epochs committed."
        return False, ""


class _WriteAheadOrchestrator(VerdictOrchestrator):
    """A verdict-giving Orchestrator that saves the snapshot before it starts any job.

    The trials about to run are then in the snapshot (as CANDIDATE) before their
    jobs exist, so a crash at any later moment cannot leave a job the snapshot does
    not know about.
    """

    def __init__(self, *args: Any, save: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._save = save

    def run_trials(self, new_trials: list[BaseTrial], existing_trials: list[BaseTrial],
                   stage_only: bool = False) -> dict[int, dict[str, Any]]:
        self._save()
        return super().run_trials(new_trials=new_trials, existing_trials=existing_trials,
                                  stage_only=stage_only)


def tune(
    problem: TuningProblem,
    directory: str | Path,
    budget_epochs: int | None = None,
    *,
    scheduler: str = "freeze-thaw",
    workers: int = 2,
    num_sobol_trials: int = 6,
    threshold: float = 0.05,
    min_epochs: int = 2,
    use_dask: bool = False,
    scheduler_address: str | None = None,
    seed: int = 0,
    progress: bool = True,
    fit_kwargs: Mapping[str, Any] | None = None,
    acqf_optimizer_kwargs: Mapping[str, Any] | None = None,
    poll_seconds: float = 1.0,
    report_seconds: float = 30.0,
    max_trials: int | None = None,
    recover: bool = False,
    scheduler_timeout: float = 10.0,
    verdict_timeout: float = DEFAULT_VERDICT_TIMEOUT,
    runner: CurveRunner | None = None,
    generation_strategy: GenerationStrategy | None = None,
    early_stopping_strategy: BaseEarlyStoppingStrategy | str | None = "gpar",
) -> dict[str, Any]:
    """Tune ``problem`` under an epoch budget; resume if ``directory`` has a snapshot.

    Args:
        problem: What to tune.
        directory: Output directory (snapshot, progress files, report).
        budget_epochs: Total training epochs (default: ``problem.budget``).
        scheduler: ``"freeze-thaw"`` (GPAR's freeze-thaw policy pauses, resumes and
            starts runs at every checkpoint; the job must be resumable, see
            :mod:`gpar_bo.tuning.freeze_thaw`) or ``"early-stopping"`` (Ax's
            Orchestrator, Sobol then GPAR, ``GPAREarlyStoppingStrategy``).
        workers: Trials trained in parallel.
        num_sobol_trials: Early stopping: Sobol trials before GPAR (GPAR also waits
            for two complete trials).
        threshold: Early stopping: stop a trial when GPAR gives it less than this
            probability of beating the best final value.
        min_epochs: Early stopping: epochs a trial trains before it can be stopped.
        use_dask: Run trials on ``dask.distributed`` (``scheduler_address`` or a
            ``LocalCluster``) instead of local processes.
        scheduler_address: Address of an existing dask scheduler.
        seed: Seed of the policy (freeze-thaw) or of the Sobol points and the
            early-stopping samples.
        progress: Show a progress bar over the budget.
        fit_kwargs: ``fit_gpytorch_mll`` arguments for GPAR's conditionals (default:
            the policy's, or BoTorch's).
        acqf_optimizer_kwargs: Early stopping: ``optimize_acqf`` arguments for GPAR's
            acquisition.
        poll_seconds: Seconds between polls of running trials.
        report_seconds: Minimum seconds between refreshes of the report.
        max_trials: Also stop after this many trials in total (default: budget only;
            freeze-thaw ends when its policy asks for a trial beyond it).
        recover: If the snapshot is damaged or missing, resume from its last good
            copy, or rebuild the experiment from ``runs/`` (see
            :mod:`gpar_bo.tuning.resume`).
        scheduler_timeout: Seconds to wait for ``scheduler_address`` to answer.
        verdict_timeout: Seconds a job waits for its verdict after each epoch before
            it pauses (a job that cannot pause stops, as interrupted): the longest the
            jobs train on, or sit idle, without this process. Must exceed the time
            of one poll, GPAR's fits included.
        runner: The runner of the jobs (default: a ``CurveRunner`` of the problem's
            job with ``workers``, ``use_dask``, ``scheduler_address`` and
            ``verdict_timeout``); it must write its progress files into
            ``directory / "runs"``.
        generation_strategy: Early stopping: the generation strategy of a new run
            (default None: ``gpar_generation_strategy`` with ``num_sobol_trials``,
            ``seed``, ``fit_kwargs`` and ``acqf_optimizer_kwargs``), e.g. Ax's own
            default to compare against; a resumed run uses the one in its snapshot.
        early_stopping_strategy: Early stopping: ``"gpar"`` (default:
            ``GPAREarlyStoppingStrategy`` with ``threshold``, ``min_epochs``,
            ``fit_kwargs`` and ``seed``), any Ax ``BaseEarlyStoppingStrategy`` (e.g.
            ``PercentileEarlyStoppingStrategy``), or None to train every trial to
            its final epoch. The report's GPAR bands use GPAR in every case.

    Returns:
        The final report (see :func:`gpar_bo.tuning.report.build_report`).

    Raises:
        TuneSettingsError: Bad settings or inputs, found before anything starts.
        DirectoryLocked: Another process is using ``directory``.
        SnapshotDamaged: The snapshot cannot be read (and ``recover`` is False).
        JobFailed: A job raised an exception (the first one ends the run; the
            exception carries the job's traceback).
        TuneError: Too many trials failed (the message gives their recorded errors).
    """
    if budget_epochs is None:
        budget_epochs = problem.budget
    if budget_epochs is None:
        raise TuneSettingsError("No epoch budget: pass budget_epochs (the problem has none).")
    check_tune_options(problem, budget_epochs, workers, num_sobol_trials, threshold,
                       min_epochs, max_trials, verdict_timeout, scheduler)
    gpar_stopping = isinstance(early_stopping_strategy, str) and early_stopping_strategy == "gpar"
    if scheduler == "freeze-thaw" and (generation_strategy is not None or not gpar_stopping):
        raise TuneSettingsError(
            "generation_strategy and early_stopping_strategy apply to scheduler "
            "early-stopping only (freeze-thaw runs its own policy).")
    if not (early_stopping_strategy is None or gpar_stopping
            or isinstance(early_stopping_strategy, BaseEarlyStoppingStrategy)):
        raise TuneSettingsError(
            "early_stopping_strategy must be 'gpar', None or an Ax "
            f"BaseEarlyStoppingStrategy, not {early_stopping_strategy!r}.")
    check_job(problem)
    if use_dask and scheduler_address is not None:
        check_scheduler(scheduler_address, scheduler_timeout)
    directory = check_output_directory(directory)
    if runner is None:
        runner = make_runner(problem, directory, workers, use_dask, scheduler_address,
                             verdict_timeout)
    if scheduler == "freeze-thaw" and not runner.resumable:
        raise TuneSettingsError(
            f"freeze-thaw pauses and resumes runs, but {runner.train} takes no "
            "'checkpoint_dir' keyword (its jobs cannot resume): make it resumable (see "
            "docs/tune.md) or use scheduler early-stopping.")
    with DirectoryLock(directory):
        if scheduler == "freeze-thaw":
            from gpar_bo.tuning.freeze_thaw import run_freeze_thaw

            return run_freeze_thaw(
                problem, directory, budget_epochs, runner, seed=seed, progress=progress,
                fit_kwargs=fit_kwargs, poll_seconds=poll_seconds,
                report_seconds=report_seconds, max_trials=max_trials, recover=recover,
            )
        return _early_stopping(
            problem, directory, budget_epochs, runner, workers=workers,
            num_sobol_trials=num_sobol_trials, threshold=threshold, min_epochs=min_epochs,
            seed=seed, progress=progress, fit_kwargs=fit_kwargs,
            acqf_optimizer_kwargs=acqf_optimizer_kwargs, poll_seconds=poll_seconds,
            report_seconds=report_seconds, max_trials=max_trials, recover=recover,
            generation_strategy=generation_strategy,
            early_stopping_strategy=early_stopping_strategy,
        )


def _early_stopping(
    problem: TuningProblem, directory: Path, budget_epochs: int, runner: CurveRunner, *,
    workers: int, num_sobol_trials: int, threshold: float, min_epochs: int, seed: int,
    progress: bool, fit_kwargs: Mapping[str, Any] | None,
    acqf_optimizer_kwargs: Mapping[str, Any] | None, poll_seconds: float,
    report_seconds: float, max_trials: int | None, recover: bool,
    generation_strategy: GenerationStrategy | None,
    early_stopping_strategy: BaseEarlyStoppingStrategy | str | None,
) -> dict[str, Any]:
    """:func:`tune` with Ax's Orchestrator and early stopping, once its checks passed
    and it holds the directory's lock."""
    snapshot = directory / SNAPSHOT
    experiment, strategy = open_run(
        problem, directory, runner, "early-stopping",
        lambda: generation_strategy if generation_strategy is not None else gpar_generation_strategy(
            problem.checkpoints, metric_name=problem.metric, num_sobol_trials=num_sobol_trials,
            seed=seed, fit_kwargs=fit_kwargs, acqf_optimizer_kwargs=acqf_optimizer_kwargs,
        ), recover)
    if strategy is None:  # open_run refuses another scheduler's experiment
        raise TuneError(f"{snapshot} has no generation strategy.")
    # GPAR's strategy also draws the report's final-value bands, whichever strategy stops.
    early_stopping = GPAREarlyStoppingStrategy(
        problem.checkpoints, metric_name=problem.metric, threshold=threshold,
        min_progression=min_epochs, fit_kwargs=fit_kwargs, seed=seed,
    )
    stopping = early_stopping if isinstance(early_stopping_strategy, str) else early_stopping_strategy
    budget = EpochBudget(budget_epochs, problem.metric, problem.epochs)
    orchestrator = _WriteAheadOrchestrator(
        experiment=experiment,
        generation_strategy=strategy,
        options=OrchestratorOptions(
            max_pending_trials=workers,
            early_stopping_strategy=stopping,
            global_stopping_strategy=budget,
            init_seconds_between_polls=poll_seconds,  # type: ignore[arg-type]
            min_seconds_before_poll=poll_seconds,
            seconds_between_polls_backoff_factor=1.0,
            logging_level=logging.WARNING if progress else logging.INFO,
            # Interrupted trials are FAILED on resume; they must not end the run.
            min_failed_trials_for_failure_rate_check=max(5, workers + 1),
        ),
        save=lambda: save_snapshot(snapshot, experiment, strategy),
    )
    # A trial written ahead before a crash (CANDIDATE, its job never started) is run by the
    # Orchestrator as one of the trials it is asked for, so it is not counted as used here.
    deployed = sum(t.status != TrialStatus.CANDIDATE for t in experiment.trials.values())
    remaining = (max_trials - deployed) if max_trials is not None else 10**6
    settings = {"budget_epochs": budget_epochs, "epochs_per_run": problem.epochs,
                "checkpoints": [int(c) for c in problem.checkpoints],
                "workers": workers, "seed": seed,
                "max_trials": max_trials, "sobol_trials": num_sobol_trials,
                "threshold": threshold, "min_epochs": min_epochs}

    def report() -> dict[str, Any]:
        return write_report(experiment, problem.checkpoints, early_stopping, directory,
                            scheduler="early-stopping", settings=settings)

    bar = Progress(problem, budget_epochs, progress)
    last_report = -math.inf
    failed_before = failed_trials(experiment)  # a job error stops only the run it happens in
    try:
        for _ in orchestrator.run_trials_and_yield_results(max_trials=max(remaining, 0)):
            save_snapshot(snapshot, experiment, strategy)
            raise_job_error(experiment, runner, failed_before)
            if time.monotonic() - last_report > report_seconds:
                report()
                last_report = time.monotonic()
            bar.update(experiment)
    except FailureRateExceededError as error:
        # Ax's error names no cause; the jobs recorded theirs in their progress files.
        raise TuneError(
            f"Stopped: too many trials failed ({failure_cause(experiment, runner)}). "
            f"Their progress files are in {runner.directory}."
        ) from error
    finally:
        bar.close()
        finish_run(directory, experiment, strategy, runner)
    return report()
