"""The tabular BO harness: asynchronous workers training runs from a lookup table.

A *problem* is a finite set of N settings with their full learning curves. A
*method* picks settings that have not been started (``Method.suggest``) and may
stop a running trial whenever it reports a checkpoint (``Method.should_stop``).
``simulate`` runs W workers asynchronously in epoch time: every tick each busy
worker trains its trial one epoch; at a checkpoint epoch the trial reports its
validation error (and loss), and is completed at the last epoch. A free worker
asks the method for a setting at once (or, if the method says so, resumes a
stopped trial from where it stopped). The cost is the number of epochs
consumed, summed over workers; the anytime result is the best *final-epoch*
error among trials trained to the last epoch (a stopped trial never counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

import torch
from torch import Tensor


@dataclass(frozen=True)
class TabularProblem:
    """Settings and their learning curves.

    Attributes:
        name: Short name used in results.
        X: ``N x d`` settings in the unit cube (double).
        error: ``N x E`` validation error after epochs ``1..E``.
        loss: ``N x E`` validation loss after epochs ``1..E``.
        checkpoints: Increasing epochs (``<= E``, last ``== E``) at which runs
            report and may be stopped.
        measurement_noise: The errors' known sampling noise, if any (a
            :mod:`gpar_bo.measurement` object, e.g. ``BinomialNoise(n_val)``).
        true_final_error: ``N`` final errors without that noise, where the table
            knows them (synthetic tables), else None.
    """

    name: str
    X: Tensor
    error: Tensor
    loss: Tensor
    checkpoints: tuple[int, ...]
    measurement_noise: Callable[[Tensor], Tensor] | None = None
    true_final_error: Tensor | None = None

    def __post_init__(self) -> None:
        n, epochs = self.error.shape
        if self.X.shape[0] != n or self.loss.shape != self.error.shape:
            raise ValueError(
                f"Shape mismatch: X {tuple(self.X.shape)}, error {tuple(self.error.shape)}, "
                f"loss {tuple(self.loss.shape)}."
            )
        if not (torch.isfinite(self.error).all() and torch.isfinite(self.X).all()):
            raise ValueError(f"Problem {self.name!r} has non-finite settings or errors.")
        c = list(self.checkpoints)
        if not c or c[-1] != epochs or any(b <= a for a, b in zip(c, c[1:])) or c[0] < 1:
            raise ValueError(f"checkpoints {c} must increase from >= 1 to the last epoch {epochs}.")
        if self.true_final_error is not None and self.true_final_error.shape != (n,):
            raise ValueError(f"true_final_error must have shape ({n},); got "
                             f"{tuple(self.true_final_error.shape)}.")

    @property
    def epochs(self) -> int:
        return self.error.shape[-1]

    @property
    def final_error(self) -> Tensor:
        """``N`` final-epoch errors."""
        return self.error[:, -1]

    @property
    def best_final_error(self) -> float:
        return float(self.final_error.min())

    def curve_at_checkpoints(self, index: int) -> Tensor:
        """The ``M`` errors of setting ``index`` at the checkpoints."""
        return self.error[index, [c - 1 for c in self.checkpoints]]


class Status(str, Enum):
    RUNNING = "running"
    STOPPED = "stopped"
    COMPLETED = "completed"


@dataclass
class Trial:
    """One run: the setting it trains and what it has reported so far."""

    trial_id: int
    setting: int
    status: Status = Status.RUNNING
    epochs: int = 0  # epochs trained so far
    errors: list[float] = field(default_factory=list)  # one per reported checkpoint


@dataclass
class History:
    """What a method may look at: every trial started so far, in order."""

    problem: TabularProblem
    trials: list[Trial] = field(default_factory=list)
    budget: int | None = None  # total epochs of the run (None: unknown to the method)
    consumed: int = 0  # epochs trained so far
    workers: int = 1

    @property
    def started(self) -> set[int]:
        return {t.setting for t in self.trials}

    def remaining(self) -> Tensor:
        """Indices of the settings not started yet (long tensor, increasing)."""
        mask = torch.ones(self.problem.X.shape[0], dtype=torch.bool)
        mask[list(self.started)] = False
        return mask.nonzero().squeeze(-1)

    def by_status(self, *statuses: Status) -> list[Trial]:
        return [t for t in self.trials if t.status in statuses]

    def curves(self, trials: Sequence[Trial] | None = None) -> tuple[Tensor, Tensor]:
        """``(X, Y)`` of trials with data: ``n x d`` settings and ``n x M`` errors
        at the checkpoints, NaN after a trial's last report (closed downwards)."""
        trials = [t for t in (self.trials if trials is None else trials) if t.errors]
        M = len(self.problem.checkpoints)
        Y = torch.full((len(trials), M), float("nan"), dtype=torch.double)
        for row, t in enumerate(trials):
            Y[row, : len(t.errors)] = torch.tensor(t.errors, dtype=torch.double)
        settings = [t.setting for t in trials]
        return self.problem.X[settings], Y

    def epochs_left(self) -> float | None:
        """Epochs a free worker can still train before the budget runs out: the budget left
        over the workers, since every worker trains one epoch per tick until it is spent
        (None without a budget)."""
        if self.budget is None:
            return None
        return max(self.budget - self.consumed, 0) / self.workers

    def incumbent(self) -> float | None:
        """Best final-epoch error of a completed trial (None before the first)."""
        finals = [t.errors[-1] for t in self.by_status(Status.COMPLETED)]
        return min(finals) if finals else None


class Method:
    """A tuning method. Subclasses implement ``suggest`` and may override the rest.

    ``reset`` is called once per seeded run before anything else; methods must
    draw all randomness from ``self.generator`` (or their own seeded state) so a
    run is reproducible.
    """

    name: str = "method"

    def reset(self, problem: TabularProblem, seed: int) -> None:
        self.problem = problem
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)

    def suggest(self, history: History) -> int:
        """The next setting to start: an index in ``history.remaining()``."""
        raise NotImplementedError

    def resume(self, history: History) -> int | None:
        """The ``trial_id`` of a stopped trial to continue on a free worker, or None.

        Asked before ``suggest`` whenever a worker is free; the trial continues
        from the epoch it was stopped at (so only the remaining epochs cost).
        Methods that never pause runs (the default) return None.
        """
        return None

    def should_stop(self, history: History, trial: Trial) -> bool:
        """Called when a running trial reports a checkpoint before the last one."""
        return False

    def on_report(self, history: History, trial: Trial) -> None:
        """Called after a trial reports a checkpoint (before ``should_stop``)."""

    def on_finish(self, history: History, trial: Trial) -> None:
        """Called after a trial is completed or stopped."""


@dataclass
class Trace:
    """The record of one seeded run of one method."""

    method: str
    problem: str
    seed: int
    epochs: list[int] = field(default_factory=list)  # cumulative epochs at each completion
    incumbent_error: list[float] = field(default_factory=list)
    incumbent_loss: list[float] = field(default_factory=list)
    suggest_seconds: list[float] = field(default_factory=list)  # per suggest call
    suggest_observed: list[int] = field(default_factory=list)  # trials with data at the call
    stop_seconds: list[float] = field(default_factory=list)  # per should_stop call
    trials: list[dict] = field(default_factory=list)  # setting, status, epochs per trial

    def to_json(self) -> dict:
        return self.__dict__.copy()


def simulate(
    method: Method,
    problem: TabularProblem,
    seed: int,
    budget: int,
    workers: int = 4,
) -> Trace:
    """Run ``method`` on ``problem`` until ``budget`` epochs are consumed.

    Workers start at time 0 in turn; within a tick, workers advance in index
    order and a freed worker is refilled before the next worker advances, so
    the schedule is deterministic given the method.

    Args:
        method: The tuning method (``reset`` is called here).
        problem: The tabular problem.
        seed: Seed of this run.
        budget: Total epochs to spend (the run stops as soon as it is reached;
            trials still running then are abandoned).
        workers: Number of asynchronous workers.

    Returns:
        The run's ``Trace``.
    """
    method.reset(problem, seed)
    history = History(problem, budget=budget, workers=workers)
    trace = Trace(method.name, problem.name, seed)
    checkpoints = set(problem.checkpoints)
    consumed = 0

    def start() -> Trial | None:
        observed = sum(1 for t in history.trials if t.errors)
        tic = time.perf_counter()
        resumed = method.resume(history)
        if resumed is not None:
            trial = history.trials[resumed]
            if trial.status is not Status.STOPPED:
                raise RuntimeError(f"{method.name} resumed trial {resumed}, which is not stopped.")
            trace.suggest_seconds.append(time.perf_counter() - tic)
            trace.suggest_observed.append(observed)
            trial.status = Status.RUNNING
            return trial
        if len(history.started) == problem.X.shape[0]:
            return None
        setting = int(method.suggest(history))
        trace.suggest_seconds.append(time.perf_counter() - tic)
        trace.suggest_observed.append(observed)
        if setting in history.started or not 0 <= setting < problem.X.shape[0]:
            raise RuntimeError(f"{method.name} suggested setting {setting}, which is not remaining.")
        trial = Trial(len(history.trials), setting)
        history.trials.append(trial)
        return trial

    slots: list[Trial | None] = [start() for _ in range(workers)]
    while consumed < budget and any(s is not None for s in slots):
        for w in range(workers):
            trial = slots[w]
            if trial is None or consumed >= budget:
                continue
            trial.epochs += 1
            consumed += 1
            history.consumed = consumed
            if trial.epochs not in checkpoints:
                continue
            trial.errors.append(float(problem.error[trial.setting, trial.epochs - 1]))
            method.on_report(history, trial)
            if trial.epochs == problem.epochs:
                trial.status = Status.COMPLETED
                trace.epochs.append(consumed)
                best = min(history.by_status(Status.COMPLETED), key=lambda t: t.errors[-1])
                trace.incumbent_error.append(best.errors[-1])
                trace.incumbent_loss.append(float(problem.loss[best.setting, -1]))
            else:
                tic = time.perf_counter()
                stop = method.should_stop(history, trial)
                trace.stop_seconds.append(time.perf_counter() - tic)
                if not stop:
                    continue
                trial.status = Status.STOPPED
            method.on_finish(history, trial)
            slots[w] = start()
    trace.trials = [
        {"setting": t.setting, "status": t.status.value, "epochs": t.epochs} for t in history.trials
    ]
    return trace
