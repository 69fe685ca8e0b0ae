r"""Freeze-thaw scheduling of real training runs: ``tune(..., scheduler="freeze-thaw")``.

The package's :class:`~gpar_bo.freeze_thaw.FreezeThawPolicy`, with its defaults,
makes every decision; this module only translates an Ax experiment and a runner
into the policy's tensors and its decisions into verdicts, resumptions and new
trials. It drives the policy exactly as the benchmark does
(``benchmarks/bo/freeze_thaw.py``): every run pauses at every checkpoint, and each
freed worker asks the policy what to train next.

**A step of the loop.** A job that reports a checkpoint waits for a verdict
(:mod:`gpar_bo.tuning.jobs`). Each poll counts one *slot* per free worker and per
job awaiting a verdict, and asks the policy once per slot, with every trial's
setting (the unit cube of :class:`~gpar_bo.ax.encoding.UnitCubeEncoding`), its
curve so far and the paused mask, in which a job awaiting a verdict counts as
paused. A decision that resumes an awaiting job gives it "continue" (it trains
on without a restart); one that resumes a paused trial resubmits its job
(``runner.resume``); a "start" adds a trial with the setting the policy chose in
the box (decoded by Ax's transforms: log scales, integers and choices). Awaiting
jobs that no decision resumed are paused: their workers go to the resumed and new
runs. So a verdict comes before the next epoch, and a paused run trains no epoch
past its checkpoint.

**The budget** is never exceeded: before a decision is carried out, the epochs
trained plus those committed (each training job to its next checkpoint) plus the
decision's own (to the chosen run's next checkpoint) must fit. The policy is told the
epochs a free worker has left (the budget left over the workers, counting the epochs
reported so far), so near the end it resumes only runs that can still reach the final
checkpoint and starts a setting only while a whole run fits (``FreezeThawPolicy.decide``'s
``epochs_left``). Once no run can finish, its fallback (successive halving) spends the
rest of the budget on paused runs and new settings, as in the benchmark: their
checkpoints stay, so a rerun with a larger budget can resume them. When a decision
does not fit (or not even the cheapest decision could: the policy is then not
asked), the loop ends: no new decisions, and awaiting jobs are paused, at once or when
they next report; once no job trains, the run is over. **Paused runs outlive the
budget**: their trials stay RUNNING in Ax, their progress files end ``paused`` and
their checkpoints stay in ``runs/``. Rerunning with the same budget ends at once with
the same report; rerunning with a larger budget resumes the experiment, and the
policy sees the paused runs as paused and may resume them from their checkpoints.

**In Ax** a paused trial stays RUNNING (it is not finished; its checkpoint is in
``runs/``), so JSON and SQLite storage need nothing new. A trial the policy
decides to start is saved in the snapshot before its job exists (write-ahead);
verdicts and resumptions change no Ax state. After ``kill -9`` the next run
reconciles the experiment with ``runs/`` (:mod:`gpar_bo.tuning.recovery`): paused
trials stay RUNNING and resumable, trials decided but never started are started,
jobs that were training or awaiting a verdict come back paused at their last
report (their checkpoint holds it; jobs that never reported are started again),
and the policy goes on from its state (``policy.pt``: its last fit, refit
schedule, stored indices, seed and random stream, written atomically whenever it
has decided), so its first decision after a resume costs what it would have cost
without the interruption, instead of a refit of every conditional. Without
that file (or if it cannot be read, which is logged) the policy is rebuilt from the
experiment: its model is refitted on the curves and its random stream reseeded from
the seed and the epochs trained.

**Limits.** A run that ended by its budget leaves its paused trials RUNNING in the
snapshot: code that reads the experiment expecting only finished trials sees them as
running (the report marks them ``paused``); their checkpoints are kept until the
output directory is removed. The metric must be non-negative and minimised (e.g. an error;
the policy models its log). Parameter constraints are not supported.
"""

from __future__ import annotations

import io
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from ax.core.arm import Arm
from ax.core.base_trial import BaseTrial
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus
from torch import Tensor

from gpar_bo.ax.curves import experiment_curves
from gpar_bo.ax.encoding import UnitCubeEncoding
from gpar_bo.curve_model import floor_zeros
from gpar_bo.freeze_thaw import Decision, FreezeThawPolicy
from gpar_bo.tuning.atomic import atomic_write_bytes
from gpar_bo.tuning.errors import TuneError
from gpar_bo.tuning.recovery import apply_status, sync_trial_data
from gpar_bo.tuning.report import write_report
from gpar_bo.tuning.runner import CurveRunner
from gpar_bo.tuning.session import (
    Progress,
    failed_trials,
    failure_cause,
    finish_run,
    open_run,
    raise_job_error,
)
from gpar_bo.tuning.snapshot import POLICY_STATE, SNAPSHOT, save_snapshot

if TYPE_CHECKING:
    from gpar_bo.tuning.problem import TuningProblem

__all__ = ["FreezeThawLoop", "Plan", "run_freeze_thaw"]

logger = logging.getLogger(__name__)

#: Statuses of trials the policy sees (failed and abandoned trials are left out).
_SEEN = (TrialStatus.RUNNING, TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED,
         TrialStatus.CANDIDATE, TrialStatus.STAGED)
#: Failed trials tolerated before the failure rate is checked (as the Orchestrator's).
_MIN_FAILED = 5
_MAX_FAILURE_RATE = 0.5
#: The reason given to the jobs paused when the budget ends.
_BUDGET_SPENT = "the epoch budget is spent"


@dataclass
class Plan:
    """What one poll's decisions do, before any of it is carried out.

    Attributes:
        cont: Awaiting trials that train on ("continue").
        pause: Awaiting trials that pause.
        resume: Paused trials whose jobs are resubmitted.
        start: Settings of new trials.
        steps: The step each awaiting trial waits at.
        observed: Checkpoints observed by each resumed trial.
        decisions: The policy's decisions, in order.
        out_of_budget: A decision did not fit the budget (or ``max_trials``): the run ends.
    """

    cont: list[int] = field(default_factory=list)
    pause: list[int] = field(default_factory=list)
    resume: list[int] = field(default_factory=list)
    start: list[dict[str, Any]] = field(default_factory=list)
    steps: dict[int, int] = field(default_factory=dict)
    observed: dict[int, int] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    out_of_budget: bool = False


class FreezeThawLoop:
    """The freeze-thaw loop over an Ax experiment (see the module docstring).

    Args:
        experiment: The experiment (objective: one non-negative metric, minimised).
        runner: A runner with the pause/resume protocol (``awaiting``, ``verdict``,
            ``resume``, ``paused`` besides Ax's ``Runner`` methods).
        problem: The problem (metric, epochs per run).
        budget_epochs: Total training epochs.
        policy: The policy (default: ``FreezeThawPolicy`` on the problem's checkpoints
            with its defaults and ``seed``).
        save: Saves the snapshot (called before any job starts and after each poll).
        max_trials: End when the policy asks for a trial beyond this many.
        seed: Seed of the default policy.
    """

    def __init__(
        self,
        experiment: Experiment,
        runner: CurveRunner,
        problem: TuningProblem,
        budget_epochs: int,
        policy: FreezeThawPolicy | None = None,
        save: Any = None,
        max_trials: int | None = None,
        seed: int = 0,
    ) -> None:
        self.experiment, self.runner, self.problem = experiment, runner, problem
        experiment.runner = runner  # Ax's ``trial.run`` starts jobs through it
        self.budget = budget_epochs
        self.checkpoints = [int(c) for c in problem.checkpoints]
        self.encoding = UnitCubeEncoding(experiment.search_space)
        self.policy = policy or FreezeThawPolicy(self.checkpoints, seed=seed)
        self.save = save or (lambda: None)
        self.max_trials = max_trials
        self.ending = False
        # (trial, step) of the verdicts and resumptions given, so that a runner that
        # has not yet seen them is not asked twice.
        self._answered: set[tuple[int, int]] = set()
        self._resumed: dict[int, int] = {}
        # Trials that failed before this run (a job error stops only the run it happens in).
        self._failed_before = failed_trials(experiment)

    # ------------------------------------------------------------------ state
    def _running(self) -> list[BaseTrial]:
        return [t for t in self.experiment.trials.values() if t.status == TrialStatus.RUNNING]

    def _curves(self) -> tuple[list[int], Tensor, Tensor]:
        """Trial indices the policy sees, their settings ``n x d`` and curves ``n x M``."""
        curves = experiment_curves(self.experiment, self.problem.metric, self.problem.checkpoints)
        by_trial = dict(zip(curves.trial_indices, curves.Y))
        trials = sorted(i for i, t in self.experiment.trials.items()
                        if t.status in _SEEN and t.arms)
        M = len(self.checkpoints)
        Y = torch.stack([by_trial.get(i, torch.full((M,), math.nan, dtype=torch.double))
                         for i in trials]) if trials else torch.zeros(0, M, dtype=torch.double)
        X = torch.stack([self.encoding.encode(self.experiment.trials[i].arms[0].parameters)
                         for i in trials]) if trials else torch.zeros(0, self.encoding.dim,
                                                                      dtype=torch.double)
        observed = ~Y.isnan()
        if bool((Y[observed] < 0).any()):
            row = int((observed & (Y.nan_to_num(0.0) < 0)).any(-1).nonzero()[0])
            raise TuneError(
                f"Trial {trials[row]} reported {self.problem.metric} < 0; freeze-thaw models "
                "the log of a non-negative metric to minimise (e.g. an error). For other "
                "metrics, call tune(scheduler='early-stopping') with GPAR strategies given "
                "gpar_options=curve_model_options(outcome_transform=None).")
        return trials, X, Y

    def trained(self) -> int:
        """Epochs trained by every trial, as far as fetched (failed ones included)."""
        curves = experiment_curves(self.experiment, self.problem.metric, self.problem.checkpoints)
        lengths = (~curves.Y.isnan()).sum(-1)
        return sum(self.checkpoints[int(k) - 1] for k in lengths.tolist() if k > 0)

    def final_value_samples(
        self, experiment: Experiment | None = None, curves: Any = None
    ) -> tuple[dict[int, Tensor], float | None]:
        """The report's bands: the policy's samples of the final value of every run
        with data short of the final checkpoint (see
        ``FreezeThawPolicy.final_error_samples``), and the incumbent. The arguments
        of ``GPAREarlyStoppingStrategy.final_value_samples`` are accepted and unused:
        the policy sees this loop's experiment. Empty while the policy has no model;
        a failed fit is logged and gives no bands (the report must not end the run).
        """
        trials, X, Y = self._curves()
        observed = (~Y.isnan()).sum(-1)
        rows = ((observed > 0) & (observed < len(self.checkpoints))).nonzero().squeeze(-1)
        finals = Y[observed == len(self.checkpoints), -1]
        incumbent = float(finals.min()) if len(finals) else None
        try:
            samples = self.policy.final_error_samples(X, Y, rows)
            if incumbent is not None:  # a 0 as the policy reads it (its samples are > 0)
                incumbent = float(floor_zeros(Y)[observed == len(self.checkpoints), -1].min())
        except Exception as error:  # as the policy's decisions: a failed fit stalls nothing
            logger.warning("No final-value bands in the report: GPAR failed (%s).", error)
            return {}, incumbent
        if samples is None:
            return {}, incumbent
        return {trials[r]: samples[:, k] for k, r in enumerate(rows.tolist())}, incumbent

    def _next_epochs(self, observed: int) -> int:
        """Epochs from a run's ``observed``-th checkpoint to its next one."""
        return self.checkpoints[observed] - (self.checkpoints[observed - 1] if observed else 0)

    # --------------------------------------------------------------- one poll
    def poll(self) -> None:
        """Settle finished trials and attach every reported epoch."""
        running = self._running()
        if not running:
            return
        sync_trial_data(self.experiment, running)
        for status, indices in self.runner.poll_trial_status(running).items():
            if status == TrialStatus.RUNNING:
                continue
            for index in indices:
                trial = self.experiment.trials[index]
                sync_trial_data(self.experiment, [trial])
                reason = "" if status == TrialStatus.COMPLETED else self.runner.poll_exception(
                    trial)
                if status == TrialStatus.EARLY_STOPPED and not self._has_data(index):
                    status = TrialStatus.FAILED  # Ax keeps no early-stopped trial without data
                apply_status(trial, status, reason)
        self._check_failures()

    def _has_data(self, index: int) -> bool:
        df = self.experiment.lookup_data(trial_indices=[index]).full_df
        return not df.empty

    def _check_failures(self) -> None:
        raise_job_error(self.experiment, self.runner, self._failed_before)
        trials = list(self.experiment.trials.values())
        failed = sum(t.status == TrialStatus.FAILED for t in trials)
        if failed >= _MIN_FAILED and failed / len(trials) > _MAX_FAILURE_RATE:
            raise TuneError(
                f"Stopped: too many trials failed ({failure_cause(self.experiment, self.runner)})."
                f" Their progress files are in {self.runner.directory}.")

    def plan(self) -> Plan:
        """Ask the policy once per slot (free worker or awaiting job); carry nothing out."""
        running = self._running()
        indices = [t.index for t in running]
        awaiting = {t: int(s) for t, s in self.runner.awaiting(running).items()
                    if (t, int(s)) not in self._answered}
        paused = set(self.runner.paused(running))
        # Data after the runner's answers: an awaiting job wrote its step before waiting.
        sync_trial_data(self.experiment, running)
        trials, X, Y = self._curves()
        observed = (~Y.isnan()).sum(-1)
        rows = {t: r for r, t in enumerate(trials)}
        # A resumed trial that has not reported since is training, whatever a slow
        # runner says.
        paused -= {t for t, k in self._resumed.items() if int(observed[rows[t]]) == k}
        M = len(self.checkpoints)
        awaiting = {t: s for t, s in awaiting.items()
                    if t in rows and 0 < int(observed[rows[t]]) < M
                    and self.checkpoints[int(observed[rows[t]]) - 1] == s}
        plan = Plan(steps=awaiting)
        slots = len(awaiting) + self.runner.poll_available_capacity()
        if self.ending or slots == 0:
            plan.pause = sorted(awaiting)
            plan.out_of_budget = self.ending
            return plan
        mask = torch.tensor([t in paused or t in awaiting for t in trials], dtype=torch.bool)
        trained = self.trained()
        # Every worker trains until the budget is spent, so a free worker has about the
        # budget left over the workers; the policy then trains only runs that can finish.
        # The epochs jobs trained since their last report are not known here, so the
        # horizon can be a few epochs long (a run it admits may then not finish).
        epochs_left = max(self.budget - trained, 0) / self.runner.max_workers
        committed = trained + sum(
            self._next_epochs(int(observed[rows[t]])) for t in indices
            if t in rows and t not in paused and t not in awaiting
            and int(observed[rows[t]]) < len(self.checkpoints))
        # The cheapest decision (a start, or a resumption of a paused or awaiting run to
        # its next checkpoint): if even it does not fit, no decision can, and the
        # policy (a GP fit) is not asked; a rerun with the same budget ends at once.
        cheapest = min([self._next_epochs(0)] + [
            self._next_epochs(int(k)) for k, held in zip(observed.tolist(), mask.tolist())
            if held and k < M])
        if committed + cheapest > self.budget:
            plan.pause = sorted(awaiting)
            plan.out_of_budget = True
            return plan
        new_trials = len(self.experiment.trials)
        for _ in range(slots):
            decision = self.policy.decide(X, Y, mask, bounds=self.encoding.bounds(X.dtype),
                                           epochs_left=epochs_left)
            if decision.action == "resume":
                row = decision.index
                cost = self._next_epochs(int(observed[row]))
            else:
                cost = self._next_epochs(0)
            if committed + cost > self.budget or (
                decision.action == "start" and self.max_trials is not None
                and new_trials >= self.max_trials
            ):
                plan.out_of_budget = True
                break
            plan.decisions.append(decision)
            committed += cost
            if decision.action == "resume":
                trial = trials[row]
                mask[row] = False
                (plan.cont if trial in awaiting else plan.resume).append(trial)
                plan.observed[trial] = int(observed[row])
            else:
                parameters = self.encoding.decode(decision.candidate)
                x = self.encoding.encode(parameters, X.dtype)
                X = torch.cat([X, x.unsqueeze(0)])
                Y = torch.cat([Y, Y.new_full((1, Y.shape[-1]), math.nan)])
                observed = torch.cat([observed, observed.new_zeros(1)])
                mask = torch.cat([mask, mask.new_zeros(1)])
                trials.append(-1 - len(plan.start))  # not an Ax trial yet
                plan.start.append(parameters)
                new_trials += 1
        plan.pause = sorted(t for t in awaiting if t not in plan.cont)
        return plan

    def carry_out(self, plan: Plan) -> None:
        """Pauses first (they free workers), then continues, resumptions and new trials
        (saved in the snapshot before their jobs start)."""
        running = {t.index: t for t in self._running()}
        for verdict, trials in (("pause", plan.pause), ("continue", plan.cont)):
            for index in trials:
                try:
                    reason = _BUDGET_SPENT if self.ending and verdict == "pause" else None
                    self.runner.verdict(running[index], verdict, reason)
                except (ValueError, RuntimeError) as error:
                    raise TuneError(
                        f"Trial {index} cannot be paused: {error} Freeze-thaw needs a "
                        "resumable job (see docs/tune.md); use --scheduler early-stopping "
                        "otherwise.") from error
                self._answered.add((index, plan.steps[index]))
        for index in plan.resume:
            self.runner.resume(running[index])
            self._resumed[index] = plan.observed[index]
        new = []
        for parameters in plan.start:
            trial = self.experiment.new_trial()
            trial.add_arm(Arm(parameters=parameters))
            new.append(trial)
        if new:
            self.save()  # write-ahead: the trials exist before their jobs do
        for trial in new:
            trial.run()

    def start_pending(self) -> None:
        """Start the trials decided before a crash whose jobs never started or never
        reported (the reconciliation records the latter paused at no checkpoint, which
        the policy cannot hold: it pauses runs only at a checkpoint)."""
        for trial in list(self.experiment.trials.values()):
            if trial.status in (TrialStatus.CANDIDATE, TrialStatus.STAGED) and trial.arms:
                logger.info("Starting trial %d, decided before the last run ended.",
                            trial.index)
                trial.run()
        running = self._running()
        for index in sorted(self.runner.paused(running)):
            if not self._has_data(index):
                logger.info("Restarting trial %d, started before the last run ended but "
                            "with no epoch reported.", index)
                self.runner.resume(self.experiment.trials[index])

    def end(self) -> bool:
        """With the budget spent: True once no job trains or awaits a verdict.

        Paused trials stay paused (RUNNING in Ax, ``paused`` in their progress files,
        their checkpoints kept): a later run with a larger budget may resume them.
        """
        running = self._running()
        return len(self.runner.paused(running)) == len(running)

    def step(self) -> bool:
        """One poll: settle, decide, carry out. True when the run is over."""
        self.poll()
        plan = self.plan()
        for decision in plan.decisions:
            logger.info("freeze-thaw: %s %s (%s)", decision.action, decision.index,
                        decision.reason)
        if plan.out_of_budget and not self.ending:
            self.ending = True
            logger.info("Freeze-thaw: the next decision does not fit the budget of %d "
                        "epochs; ending (paused runs stay paused).", self.budget)
        self.carry_out(plan)
        return self.ending and self.end()


def _save_policy(policy: FreezeThawPolicy, path: Path) -> None:
    """Write the policy's state atomically (a process killed meanwhile leaves the last one)."""
    buffer = io.BytesIO()
    torch.save(policy.state_dict(), buffer)
    atomic_write_bytes(path, buffer.getvalue())


def _restore_policy(policy: FreezeThawPolicy, path: Path) -> bool:
    """Load the policy's saved state, if there is one; True if it was loaded. The state
    is what the policy learnt (its last fit and stored indices), all of it recomputable
    from the curves: one that cannot be read is said and the policy starts afresh."""
    if not path.exists():
        return False
    try:
        policy.load_state_dict(torch.load(path, weights_only=True))
    except Exception as error:  # a cache: refitting on the curves loses nothing
        logger.warning("Freeze-thaw: the saved policy state %s could not be loaded (%s); "
                       "the policy is refitted on the curves.", path, error)
        return False
    return True


def _policy_seed(seed: int, trained: int) -> int:
    """The policy's seed on resume without a saved state: the seed and the epochs trained
    so far, so that a resumed run does not replay the random draws of its start."""
    return seed if trained == 0 else int(torch.randint(
        2**31 - 1, (1,), generator=torch.Generator().manual_seed(seed * 1_000_003 + trained)))


def run_freeze_thaw(
    problem: TuningProblem, directory: Path, budget_epochs: int, runner: CurveRunner, *,
    seed: int = 0, progress: bool = True, fit_kwargs: Mapping[str, Any] | None = None,
    poll_seconds: float = 1.0, report_seconds: float = 30.0, max_trials: int | None = None,
    recover: bool = False,
) -> dict[str, Any]:
    """:func:`gpar_bo.tuning.loop.tune` with freeze-thaw scheduling, once its checks
    passed and it holds the directory's lock (see the module docstring)."""
    snapshot = directory / SNAPSHOT
    experiment, _ = open_run(problem, directory, runner, "freeze-thaw", lambda: None, recover)

    def save_policy() -> None:
        nonlocal saved_decisions
        if loop.policy.decisions != saved_decisions:  # it changes only when it decides
            _save_policy(loop.policy, policy_state)
            saved_decisions = loop.policy.decisions

    def save() -> None:
        save_policy()
        save_snapshot(snapshot, experiment, None)

    loop = FreezeThawLoop(experiment, runner, problem, budget_epochs, save=save,
                          max_trials=max_trials)
    loop.policy = FreezeThawPolicy(loop.checkpoints, seed=_policy_seed(seed, loop.trained()),
                                   **({"fit_kwargs": dict(fit_kwargs)} if fit_kwargs else {}))
    policy_state = directory / POLICY_STATE
    if _restore_policy(loop.policy, policy_state):
        logger.info("Freeze-thaw: the policy goes on from its saved state (%d decisions).",
                    loop.policy.decisions)
    saved_decisions = loop.policy.decisions
    settings = {"budget_epochs": budget_epochs, "epochs_per_run": problem.epochs,
                "checkpoints": [int(c) for c in problem.checkpoints],
                "workers": runner.max_workers, "seed": seed, "max_trials": max_trials}

    def report() -> dict[str, Any]:
        return write_report(experiment, problem.checkpoints, loop, directory,
                            scheduler="freeze-thaw", settings=settings)

    bar = Progress(problem, budget_epochs, progress)
    last_report = -math.inf
    try:
        save()
        loop.start_pending()
        save()
        while not loop.step():
            save()
            if time.monotonic() - last_report > report_seconds:
                report()
                last_report = time.monotonic()
            bar.update(experiment)
            time.sleep(poll_seconds)
    finally:
        bar.close()
        save_policy()  # the last step's decisions too
        finish_run(directory, experiment, None, runner)
    return report()
