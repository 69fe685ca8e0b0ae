"""What both schedulers of :func:`gpar_bo.tuning.loop.tune` share.

A tuning run in an output directory opens (or resumes and reconciles) its experiment,
saves write-ahead snapshots, shows a progress bar over the epoch budget, names the
causes of failed jobs, and ends by stopping its jobs and recording every epoch they
reported. The Orchestrator loop (``--scheduler early-stopping``,
:mod:`gpar_bo.tuning.loop`) and the freeze-thaw loop (``--scheduler freeze-thaw``,
:mod:`gpar_bo.tuning.freeze_thaw`) both use these pieces.

The scheduler that made an experiment is stored in its properties
(``SCHEDULER_PROPERTY``); resuming it with the other one is refused, as paused runs
and generation strategies mean different things to the two.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ax.api.utils.instantiation.from_string import optimization_config_from_string
from ax.core.experiment import Experiment
from ax.core.search_space import SearchSpace
from ax.core.trial_status import TrialStatus
from ax.generation_strategy.generation_strategy import GenerationStrategy

from gpar_bo.tuning.checks import SCHEDULERS
from gpar_bo.tuning.errors import JobFailed, TuneSettingsError
from gpar_bo.tuning.jobs import DEFAULT_VERDICT_TIMEOUT, read_job
from gpar_bo.tuning.recovery import reconcile, sync_trial_data
from gpar_bo.tuning.resume import open_experiment
from gpar_bo.tuning.runner import CurveMetric, CurveRunner
from gpar_bo.tuning.snapshot import SNAPSHOT, save_snapshot

if TYPE_CHECKING:
    from gpar_bo.tuning.problem import TuningProblem

__all__ = [
    "SCHEDULERS",
    "SCHEDULER_PROPERTY",
    "Progress",
    "best_final",
    "failed_trials",
    "failure_cause",
    "finish_run",
    "raise_job_error",
    "make_runner",
    "open_run",
    "trained_epochs_by_trial",
]

#: The experiment property naming the scheduler that made it (absent: early-stopping,
#: the only scheduler before freeze-thaw).
SCHEDULER_PROPERTY = "gpar_bo_scheduler"


def make_runner(problem: TuningProblem, directory: Path, workers: int, use_dask: bool,
                scheduler_address: str | None,
                verdict_timeout: float = DEFAULT_VERDICT_TIMEOUT) -> CurveRunner:
    """The runner of ``problem``'s jobs, writing into ``directory / "runs"``."""
    return CurveRunner(problem.train, str(directory / "runs"), problem.train_kwargs,
                       max_workers=workers, use_dask=use_dask,
                       scheduler_address=scheduler_address, final_step=problem.epochs,
                       verdict_timeout=verdict_timeout, checkpoints=_recorded(problem))


def _recorded(problem: TuningProblem) -> list[int] | None:
    """The runner's checkpoints: None when they are every epoch (however spelled)."""
    every = list(range(1, problem.epochs + 1))
    return None if [int(c) for c in problem.checkpoints] == every else list(problem.checkpoints)


def new_experiment(problem: TuningProblem, runner: CurveRunner, scheduler: str) -> Experiment:
    """An empty experiment for ``problem``, minimising its metric."""
    return Experiment(
        name=problem.name,
        search_space=SearchSpace(parameters=list(problem.parameters)),
        optimization_config=optimization_config_from_string(f"-{problem.metric}"),
        metrics=[CurveMetric(problem.metric)],
        tracking_metrics=[CurveMetric(m, lower_is_better=None) for m in problem.tracking_metrics],
        runner=runner,
        properties={SCHEDULER_PROPERTY: scheduler},
    )


def open_run(
    problem: TuningProblem, directory: Path, runner: CurveRunner, scheduler: str,
    new_strategy: Callable[[], GenerationStrategy | None], recover: bool,
) -> tuple[Experiment, GenerationStrategy | None]:
    """Open ``directory``'s experiment (new, resumed or recovered), settle what the jobs
    of an earlier run did, and save the snapshot; before any new job starts.

    Raises:
        TuneSettingsError: The directory's experiment was made by the other scheduler.
    """
    experiment, strategy = open_experiment(
        directory, problem.name, [p.name for p in problem.parameters], runner,
        lambda: (new_experiment(problem, runner, scheduler), new_strategy()), recover=recover)
    made_by = experiment._properties.get(SCHEDULER_PROPERTY, "early-stopping")
    if made_by != scheduler:
        raise TuneSettingsError(
            f"{directory} was tuned with --scheduler {made_by}; resume it with the same "
            f"scheduler, or use another output directory for --scheduler {scheduler}.")
    reconcile(experiment, runner)
    save_snapshot(directory / SNAPSHOT, experiment, strategy)
    return experiment, strategy


def trained_epochs_by_trial(experiment: Experiment, metric: str) -> dict[int, int]:
    """Trial index -> the last step it reported (its epochs trained, as far as fetched)."""
    df = experiment.lookup_data().full_df
    if df.empty or "step" not in df:
        return {}
    df = df[df["metric_name"] == metric].dropna(subset=["step"])
    return {int(t): int(s) for t, s in df.groupby("trial_index")["step"].max().items()}


def best_final(experiment: Experiment, metric: str, epochs: int) -> float | None:
    """The lowest final-epoch value (None before a trial reaches the final epoch).

    A trial stopped during its final epoch finishes it, so reaching the final epoch,
    not the COMPLETED status, is what makes a final value.
    """
    df = experiment.lookup_data().full_df
    if df.empty or "step" not in df:
        return None
    final = df[(df["metric_name"] == metric) & (df["step"] == epochs)]
    return None if final.empty else float(final["mean"].min())


def failure_cause(experiment: Experiment, runner: CurveRunner) -> str:
    """The errors failed jobs recorded, most common first, for a one-line message."""
    failed = [t for t in experiment.trials.values() if t.status == TrialStatus.FAILED]
    causes: dict[str, list[int]] = {}
    for trial in failed:
        causes.setdefault(runner.poll_exception(trial).strip().splitlines()[-1], []).append(
            trial.index)
    ranked = sorted(causes.items(), key=lambda item: -len(item[1]))
    return "; ".join(f"trials {indices}: {cause}" for cause, indices in ranked[:3])


def failed_trials(experiment: Experiment) -> set[int]:
    """The indices of the experiment's FAILED trials."""
    return {i for i, t in experiment.trials.items() if t.status == TrialStatus.FAILED}


def raise_job_error(experiment: Experiment, runner: CurveRunner, known: set[int]) -> None:
    """Stop at the first trial, not in ``known``, whose job raised an exception.

    Jobs that died (their process killed) or were interrupted recorded no traceback;
    they count towards the failure rate instead.

    Raises:
        JobFailed: One line naming the trial and the error, with the job's traceback.
    """
    for index in sorted(failed_trials(experiment) - known):
        path = runner.progress_file(index)
        status = read_job(path).status or {}
        if status.get("status") == "failed" and status.get("traceback"):
            raise JobFailed(
                f"trial {index}'s job raised {status['error'].splitlines()[-1]} (its "
                f"traceback is in {path}). Fix the job, then rerun the same command: the "
                "other trials resume.", index, status["traceback"])


class Progress:
    """A progress bar over the epoch budget, with the trials and the best final value."""

    def __init__(self, problem: TuningProblem, budget_epochs: int, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.problem, self.budget = problem, budget_epochs
        self.bar = tqdm(total=budget_epochs, unit="epoch", disable=not enabled, desc="tuning")

    def update(self, experiment: Experiment) -> None:
        trained = sum(trained_epochs_by_trial(experiment, self.problem.metric).values())
        self.bar.n = min(trained, self.budget)
        best = best_final(experiment, self.problem.metric, self.problem.epochs)
        self.bar.set_postfix(trials=len(experiment.trials),
                             best="-" if best is None else f"{best:.4f}")
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def finish_run(directory: Path, experiment: Experiment, strategy: GenerationStrategy | None,
               runner: CurveRunner) -> None:
    """Save, stop the jobs, record every epoch they reported, save again.

    The epochs jobs wrote after the last poll (e.g. after a stop) count too, those of
    failed trials included, which Ax no longer fetches.
    """
    snapshot = directory / SNAPSHOT
    save_snapshot(snapshot, experiment, strategy)
    runner.shutdown()  # waits for local jobs to reach their next checkpoint
    # From the progress files, not ``experiment.fetch_data()``: every metric is a
    # CurveMetric, and Ax's fetch raises for a trial that has not reported yet.
    sync_trial_data(experiment)
    save_snapshot(snapshot, experiment, strategy)

