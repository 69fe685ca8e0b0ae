r"""The tuning loop: Ax's ``Orchestrator`` + GPAR + early stopping under an epoch budget.

``tune`` runs (or resumes) an experiment in one output directory:

* ``snapshot.json``: Ax's JSON encoding of the experiment and generation
  strategy, rewritten atomically after every poll of the Orchestrator;
* ``runs/``: the trials' progress files (:mod:`gpar_bo.tuning.jobs`);
* ``report.json`` / ``report.png``: :mod:`gpar_bo.tuning.report`, refreshed as it runs.

If ``snapshot.json`` exists, the loop resumes it: trials that completed since the
last snapshot are recovered from their progress files, trials that were running
(their process died with the old loop) are marked FAILED, and generation goes on
from the stored generation strategy.

The budget counts epochs: no new trial starts once the epochs trained plus those
the running trials may still train, plus one full trial, would exceed it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ax.api.utils.instantiation.from_string import optimization_config_from_string
from ax.core.experiment import Experiment
from ax.core.parameter import RangeParameter
from ax.core.search_space import SearchSpace
from ax.core.trial_status import TrialStatus
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.orchestration.orchestrator import Orchestrator, OrchestratorOptions

from gpar_bo.ax.checkpoints import Checkpoints
from gpar_bo.ax.early_stopping import GPAREarlyStoppingStrategy
from gpar_bo.ax.generation import gpar_generation_strategy
from gpar_bo.tuning.report import write_report
from gpar_bo.tuning.runner import CurveMetric, CurveRunner
from gpar_bo.tuning.snapshot import SNAPSHOT, load_snapshot, save_snapshot

__all__ = [
    "EpochBudget",
    "check_tune_options",
    "TuningProblem",
    "tune",
]

logger = logging.getLogger(__name__)


@dataclass
class TuningProblem:
    """What to tune: parameters, the training job and its learning-curve metric.

    Attributes:
        name: The experiment name.
        parameters: Ax ``RangeParameter``\\ s of the search space.
        metric: The objective metric reported every epoch (minimised).
        epochs: Epochs per full trial; the checkpoints are 1..epochs.
        train: The training function, ``"module:function"`` (:mod:`gpar_bo.tuning.jobs`).
        train_kwargs: Its keyword arguments (JSON-serialisable).
        tracking_metrics: Further values the job reports, recorded but not optimised.
    """

    name: str
    parameters: list[RangeParameter]
    metric: str
    epochs: int
    train: str
    train_kwargs: dict[str, Any] = field(default_factory=dict)
    tracking_metrics: list[str] = field(default_factory=list)

    @property
    def checkpoints(self) -> Checkpoints:
        """Epochs 1..epochs."""
        return Checkpoints(range(1, self.epochs + 1))


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
        df = experiment.lookup_data().full_df
        if df.empty or "step" not in df:
            return {}
        df = df[df["metric_name"] == self.metric].dropna(subset=["step"])
        return {int(t): int(s) for t, s in df.groupby("trial_index")["step"].max().items()}

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


def _best_final(experiment: Experiment, metric: str, epochs: int) -> float | None:
    """The lowest final-epoch value (None before a trial reaches the final epoch).

    A trial stopped during its final epoch finishes it, so reaching the final epoch,
    not the COMPLETED status, is what makes a final value.
    """
    df = experiment.lookup_data().full_df
    if df.empty or "step" not in df:
        return None
    final = df[(df["metric_name"] == metric) & (df["step"] == epochs)]
    return None if final.empty else float(final["mean"].min())


def _new_experiment(problem: TuningProblem, runner: CurveRunner) -> Experiment:
    return Experiment(
        name=problem.name,
        search_space=SearchSpace(parameters=list(problem.parameters)),
        optimization_config=optimization_config_from_string(f"-{problem.metric}"),
        metrics=[CurveMetric(problem.metric)],
        tracking_metrics=[CurveMetric(m, lower_is_better=None) for m in problem.tracking_metrics],
        runner=runner,
    )


def check_tune_options(
    problem: TuningProblem, budget_epochs: int, workers: int, num_sobol_trials: int,
    threshold: float, min_epochs: int, max_trials: int | None,
) -> None:
    """Reject settings under which ``tune`` would run no trial or could not work."""
    problems = []
    if workers < 1:
        problems.append(f"workers must be >= 1 (got {workers})")
    if budget_epochs < problem.epochs:
        problems.append(f"the budget ({budget_epochs} epochs) must cover one full trial "
                        f"({problem.epochs} epochs)")
    if num_sobol_trials < 0:
        problems.append(f"num_sobol_trials must be >= 0 (got {num_sobol_trials})")
    if not 0 < threshold < 1:
        problems.append(f"threshold must be a probability in (0, 1) (got {threshold})")
    if not 1 <= min_epochs <= problem.epochs:
        problems.append(f"min_epochs must be in [1, {problem.epochs}] (got {min_epochs})")
    if max_trials is not None and max_trials < 1:
        problems.append(f"max_trials must be >= 1 (got {max_trials})")
    if problems:
        raise ValueError("Bad tuning settings: " + "; ".join(problems) + ".")


def tune(
    problem: TuningProblem,
    directory: str | Path,
    budget_epochs: int,
    *,
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
) -> dict[str, Any]:
    """Tune ``problem`` under an epoch budget; resume if ``directory`` has a snapshot.

    Args:
        problem: What to tune.
        directory: Output directory (snapshot, progress files, report).
        budget_epochs: Total training epochs.
        workers: Trials trained in parallel.
        num_sobol_trials: Sobol trials before GPAR (GPAR also waits for two
            complete trials).
        threshold: Early-stop a trial when GPAR gives it less than this
            probability of beating the best final value.
        min_epochs: Epochs a trial trains before it can be stopped.
        use_dask: Run trials on ``dask.distributed`` (``scheduler_address`` or a
            ``LocalCluster``) instead of local processes.
        scheduler_address: Address of an existing dask scheduler.
        seed: Seed of the Sobol points and of the early-stopping samples.
        progress: Show a progress bar over the budget.
        fit_kwargs: ``fit_gpytorch_mll`` arguments for GPAR's conditionals.
        acqf_optimizer_kwargs: ``optimize_acqf`` arguments for GPAR's acquisition.
        poll_seconds: Seconds between polls of running trials.
        report_seconds: Minimum seconds between refreshes of the report.
        max_trials: Also stop after this many trials in total (default: budget only).

    Returns:
        The final report (see :func:`gpar_bo.tuning.report.build_report`).
    """
    from tqdm.auto import tqdm

    check_tune_options(problem, budget_epochs, workers, num_sobol_trials, threshold,
                        min_epochs, max_trials)
    # Absolute: trials store their progress files' paths, which a resume from another
    # working directory must still find.
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    snapshot = directory / SNAPSHOT
    runner = CurveRunner(problem.train, str(directory / "runs"), problem.train_kwargs,
                         max_workers=workers, use_dask=use_dask,
                         scheduler_address=scheduler_address, final_step=problem.epochs)
    if snapshot.exists():
        experiment, strategy = load_snapshot(snapshot)
        stored = experiment.runner
        same = (
            experiment.name == problem.name
            and isinstance(stored, CurveRunner)
            and stored.train == problem.train
            and stored.train_kwargs == problem.train_kwargs
            and list(experiment.search_space.parameters) == [p.name for p in problem.parameters]
        )
        if not same:
            raise ValueError(
                f"{directory} holds another tuning experiment ({experiment.name!r}, job "
                f"settings {getattr(stored, 'train_kwargs', None)}); use another output "
                f"directory to start {problem.name!r} with {problem.train_kwargs}."
            )
        # A fresh runner (same job) owns no jobs, so it reports the trials that were
        # running as FAILED, and recovers any that finished since the snapshot.
        runner = CurveRunner(runner.train, runner.directory,
                             dict(experiment.runner.train_kwargs), workers, use_dask,
                             scheduler_address, final_step=problem.epochs)
        experiment.runner = runner
        logger.info("Resuming %s: %d trials so far.", snapshot, len(experiment.trials))
    else:
        experiment = _new_experiment(problem, runner)
        strategy = gpar_generation_strategy(
            problem.checkpoints, metric_name=problem.metric, num_sobol_trials=num_sobol_trials,
            seed=seed, fit_kwargs=fit_kwargs, acqf_optimizer_kwargs=acqf_optimizer_kwargs,
        )
    early_stopping = GPAREarlyStoppingStrategy(
        problem.checkpoints, metric_name=problem.metric, threshold=threshold,
        min_progression=min_epochs, fit_kwargs=fit_kwargs, seed=seed,
    )
    budget = EpochBudget(budget_epochs, problem.metric, problem.epochs)
    orchestrator = Orchestrator(
        experiment=experiment,
        generation_strategy=strategy,
        options=OrchestratorOptions(
            max_pending_trials=workers,
            early_stopping_strategy=early_stopping,
            global_stopping_strategy=budget,
            init_seconds_between_polls=poll_seconds,  # type: ignore[arg-type]
            min_seconds_before_poll=poll_seconds,
            seconds_between_polls_backoff_factor=1.0,
            logging_level=logging.WARNING if progress else logging.INFO,
            # Interrupted trials are FAILED on resume; they must not end the run.
            min_failed_trials_for_failure_rate_check=max(5, workers + 1),
        ),
    )
    remaining = (max_trials - len(experiment.trials)) if max_trials is not None else 10**6
    bar = tqdm(total=budget_epochs, unit="epoch", disable=not progress, desc="tuning")
    last_report = -math.inf
    try:
        for _ in orchestrator.run_trials_and_yield_results(max_trials=max(remaining, 0)):
            save_snapshot(snapshot, experiment, strategy)
            if time.monotonic() - last_report > report_seconds:
                write_report(experiment, problem.checkpoints, early_stopping, directory)
                last_report = time.monotonic()
            bar.n = min(budget.trained(experiment), budget_epochs)
            best = _best_final(experiment, problem.metric, problem.epochs)
            bar.set_postfix(trials=len(experiment.trials),
                            best="-" if best is None else f"{best:.4f}")
            bar.refresh()
    finally:
        bar.close()
        save_snapshot(snapshot, experiment, strategy)
        runner.shutdown()  # waits for local jobs to finish their current epoch
        # The epochs jobs wrote after Ax's last poll (e.g. after a stop) count too.
        experiment.fetch_data()
        save_snapshot(snapshot, experiment, strategy)
    return write_report(experiment, problem.checkpoints, early_stopping, directory)
