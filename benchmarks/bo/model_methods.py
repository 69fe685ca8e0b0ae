"""Model-based BO methods for the tabular harness, all with the same acquisition.

Each method starts ``n_initial`` = 4 random settings (one per worker), then picks
the remaining setting that maximises ``qLogExpectedImprovement`` of the negative
final-checkpoint log error (``Surrogate.acquisition``: 128 Sobol QMC samples with
a fixed seed, ``best_f = -log(incumbent)``, running trials as ``X_pending``),
evaluated with ``optimize_acqf_discrete`` over ``MAX_CANDIDATES`` = 1,000 remaining
settings drawn at random per suggestion (all of them once fewer remain). So the
comparison is of surrogates. Until the surrogate can be fitted (two completed
runs for Ax's default and GPAR, one for the others) and an incumbent exists (the
acquisition needs ``best_f``), suggestions stay random.

Early-stopping methods use Ax's strategies unchanged through ``AxMirror``, an Ax
``Client`` experiment that mirrors the harness's trials and reports.

Deviation: ``freeze_thaw`` uses the same projected-to-final-epoch qLogEI, not the
BoTorch multi-fidelity tutorial's ``qMultiFidelityKnowledgeGradient`` with a cost
model. Over a discrete table the fidelity is not a free choice (every started
run trains until it is stopped), and KG needs an inner optimisation of its
fantasy solutions: the tutorial's continuous ``optimize_acqf`` (128 fantasies,
10 restarts, 512 raw samples) ran for over 10 minutes for one suggestion at 50
observed MNIST runs on one thread, against well under a second for qLogEI.

``MODEL_METHODS`` maps method names to factories.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.early_stopping.strategies import PercentileEarlyStoppingStrategy
from ax.early_stopping.strategies.base import BaseEarlyStoppingStrategy
from ax.utils.common.logger import set_ax_logger_levels
from botorch.models.transforms.outcome import Log
from botorch.optim import optimize_acqf_discrete

from benchmarks.bo.harness import History, Method, Status, TabularProblem, Trial
from benchmarks.bo.surrogates import SURROGATES, Surrogate
from gpar_bo.ax import GPAREarlyStoppingStrategy

__all__ = ["MODEL_METHODS", "AxMirror", "SurrogateMethod"]

METRIC = "error"
#: Hyperparameters are re-optimised once the data grew by this fraction (the
#: surrogates' default), also in GPAR's early-stopping strategy.
REFIT_GROWTH = 0.2
#: The acquisition is maximised over this many remaining settings, drawn at random
#: per suggestion: over all of them GPAR's suggestions cost more than every method
#: and seed of the benchmark could afford on 2 cores (see the write-up beside
#: ``benchmarks/results/bo_mnist.md``).
MAX_CANDIDATES = 1000


class AxMirror:
    """An Ax experiment mirroring a harness run, to ask an Ax early-stopping strategy.

    Harness trial ``i`` is attached (with its setting as parameters ``x0..``) at its
    first report; every report is attached with ``progression`` = the epoch;
    finished trials are marked completed or early-stopped. Ax's INFO logs (one
    block per stopped trial) are silenced process-wide.
    """

    def __init__(self, problem: TabularProblem, strategy: BaseEarlyStoppingStrategy) -> None:
        set_ax_logger_levels(logging.WARNING)
        self.problem = problem
        self.client = Client(random_seed=0)
        self.client.configure_experiment(
            parameters=[
                RangeParameterConfig(name=f"x{j}", bounds=(0.0, 1.0), parameter_type="float")
                for j in range(problem.X.shape[-1])
            ]
        )
        self.client.configure_optimization(objective=f"-{METRIC}")
        self.client.set_early_stopping_strategy(strategy)
        self.index: dict[int, int] = {}  # harness trial id -> Ax trial index

    def report(self, trial: Trial) -> None:
        if trial.trial_id not in self.index:
            x = self.problem.X[trial.setting].tolist()
            self.index[trial.trial_id] = self.client.attach_trial(
                {f"x{j}": v for j, v in enumerate(x)}
            )
        epoch = self.problem.checkpoints[len(trial.errors) - 1]
        self.client.attach_data(
            self.index[trial.trial_id], {METRIC: trial.errors[-1]}, progression=epoch
        )

    def should_stop(self, trial: Trial) -> bool:
        return self.client.should_stop_trial_early(self.index[trial.trial_id])

    def finish(self, trial: Trial) -> None:
        if trial.status is Status.COMPLETED:
            self.client.complete_trial(self.index[trial.trial_id])
        else:
            self.client.mark_trial_early_stopped(self.index[trial.trial_id])


class SurrogateMethod(Method):
    """BO with a ``Surrogate`` and qLogEI over the remaining settings.

    Args:
        name: The method's name.
        surrogate: Surrogate class (built per run on the problem's checkpoints).
        early_stopping: Builds an Ax early-stopping strategy for a problem, or None.
        n_initial: Random settings before the model is used.
        max_candidates: Remaining settings the acquisition is maximised over (a
            random subset per suggestion when more remain; None for all).
        max_batch_size: Candidates per acquisition evaluation (BoTorch's default;
            LKGP's sampler re-solves its training system per evaluation, so few
            large batches are much cheaper than many small ones).
    """

    def __init__(
        self,
        name: str,
        surrogate: type[Surrogate],
        early_stopping: Callable[[TabularProblem], BaseEarlyStoppingStrategy] | None = None,
        n_initial: int = 4,
        max_candidates: int | None = MAX_CANDIDATES,
        max_batch_size: int = 2048,
    ) -> None:
        if n_initial < 1:
            raise ValueError(f"n_initial must be >= 1; got {n_initial}.")
        self.name = name
        self.surrogate_class = surrogate
        self.early_stopping = early_stopping
        self.n_initial = n_initial
        self.max_candidates = max_candidates
        self.max_batch_size = max_batch_size

    def reset(self, problem: TabularProblem, seed: int) -> None:
        super().reset(problem, seed)
        self.surrogate = self.surrogate_class(problem.checkpoints)
        self.mirror = (
            None if self.early_stopping is None else AxMirror(problem, self.early_stopping(problem))
        )

    def suggest(self, history: History) -> int:
        remaining = history.remaining()
        incumbent = history.incumbent()
        X, Y = history.curves()
        if len(history.trials) < self.n_initial or incumbent is None or not self.surrogate.can_fit(Y):
            return int(remaining[torch.randint(len(remaining), (1,), generator=self.generator)])
        self.surrogate.fit(X, Y)
        pending = [t.setting for t in history.by_status(Status.RUNNING)]
        acqf = self.surrogate.acquisition(
            incumbent, self.problem.X[pending] if pending else None
        )
        if self.max_candidates is not None and len(remaining) > self.max_candidates:
            subset = torch.randperm(len(remaining), generator=self.generator)
            remaining = remaining[subset[: self.max_candidates]]
        choices = self.problem.X[remaining]
        candidate, _ = optimize_acqf_discrete(
            acqf, q=1, choices=choices, max_batch_size=self.max_batch_size
        )
        return int(remaining[(choices == candidate).all(-1).nonzero()[0, 0]])

    def on_report(self, history: History, trial: Trial) -> None:
        if self.mirror is not None:
            self.mirror.report(trial)

    def should_stop(self, history: History, trial: Trial) -> bool:
        return self.mirror is not None and self.mirror.should_stop(trial)

    def on_finish(self, history: History, trial: Trial) -> None:
        if self.mirror is not None:
            self.mirror.finish(trial)


def percentile_strategy(problem: TabularProblem) -> BaseEarlyStoppingStrategy:
    """Ax's ``PercentileEarlyStoppingStrategy`` with its defaults (stop a trial below
    the 50th percentile of the trials at the same step once 5 curves exist), judged
    from the first checkpoint, as GPAR's strategy is."""
    return PercentileEarlyStoppingStrategy(min_progression=problem.checkpoints[0])


def gpar_strategy(problem: TabularProblem) -> BaseEarlyStoppingStrategy:
    """``GPAREarlyStoppingStrategy`` with its defaults (threshold 0.05, judged at every
    checkpoint) and the BO surrogate's GPAR variant (D-GPAR-NL-X on log error),
    re-optimising hyperparameters on the surrogate's schedule (``REFIT_GROWTH``)."""
    return GPAREarlyStoppingStrategy(
        problem.checkpoints,
        metric_name=METRIC,
        threshold=0.05,
        gpar_options={"kernel": "NL-X", "denoise": True, "outcome_transform": Log()},
        refit_growth=REFIT_GROWTH,
    )


MODEL_METHODS: dict[str, Callable[[], Method]] = {
    "ax_default": lambda: SurrogateMethod("ax_default", SURROGATES["ax_default"]),
    "ax_percentile_es": lambda: SurrogateMethod(
        "ax_percentile_es", SURROGATES["ax_default"], percentile_strategy
    ),
    "ax_learning_curve": lambda: SurrogateMethod(
        "ax_learning_curve", SURROGATES["ax_learning_curve"]
    ),
    "lkgp": lambda: SurrogateMethod("lkgp", SURROGATES["lkgp"]),
    "freeze_thaw": lambda: SurrogateMethod("freeze_thaw", SURROGATES["freeze_thaw"]),
    "gpar": lambda: SurrogateMethod("gpar", SURROGATES["gpar"]),
    "gpar_es": lambda: SurrogateMethod("gpar_es", SURROGATES["gpar"], gpar_strategy),
}
