"""Model-free baselines for the tabular BO harness.

Every method draws its randomness from ``self.generator`` (seeded by
``Method.reset``) or from a sampler seeded with the run's seed, so a run is
reproducible.
"""

from __future__ import annotations

import math

import torch

from benchmarks.bo.harness import History, Method, Status, TabularProblem, Trial


def random_remaining(history: History, generator: torch.Generator) -> int:
    """A uniformly random setting among those not started yet."""
    remaining = history.remaining()
    return int(remaining[torch.randint(len(remaining), (1,), generator=generator)])


class RandomSearch(Method):
    """Random settings, each trained to the last epoch."""

    name = "random"

    def suggest(self, history: History) -> int:
        return random_remaining(history, self.generator)


class ASHA(Method):
    """Asynchronous successive halving with stopping (Ray Tune's AsyncHyperBand rule).

    Rungs are the problem's checkpoints before the last. A trial reporting at a
    rung is stopped unless its error is in the top ``1/eta`` of all errors
    recorded at that rung so far (its own included): it continues iff fewer
    than ``ceil(n / eta)`` of the ``n`` recorded errors are strictly lower, so
    the first trial at a rung always continues and ties continue. New settings
    are uniformly random.
    """

    name = "asha"

    def __init__(self, eta: float = 3.0) -> None:
        self.eta = eta

    def reset(self, problem: TabularProblem, seed: int) -> None:
        super().reset(problem, seed)
        self.recorded: dict[int, list[float]] = {c: [] for c in problem.checkpoints[:-1]}

    def suggest(self, history: History) -> int:
        return random_remaining(history, self.generator)

    def should_stop(self, history: History, trial: Trial) -> bool:
        values = self.recorded[trial.epochs]
        value = trial.errors[-1]
        values.append(value)
        better = sum(v < value for v in values)
        return better >= math.ceil(len(values) / self.eta)


class OneEpochTopK(Method):
    """ "One epoch is all you need" (Egele et al. 2023), in asynchronous rounds.

    Each round screens ``n_screen`` random settings: each is stopped at the
    first checkpoint (epoch 1). Once all of a round's screens have reported,
    its ``top_k`` settings by that first error are resumed (continued from
    epoch 1, not retrained) and trained to the last epoch. A free worker
    resumes pending top-k trials first, otherwise starts the next screen, so
    rounds overlap and workers never idle; rounds go on while budget remains.

    Defaults: ``n_screen=100``, ``top_k=5`` cost 100 + 5 * 20 = 200 epochs per
    round on 21-epoch curves, i.e. half the compute screens and half trains,
    and 5 rounds fit in the 1000-epoch budget.
    """

    name = "one_epoch"

    def __init__(self, n_screen: int = 100, top_k: int = 5) -> None:
        if not 1 <= top_k <= n_screen:
            raise ValueError(f"need 1 <= top_k <= n_screen, got {top_k}, {n_screen}.")
        self.n_screen = n_screen
        self.top_k = top_k

    def reset(self, problem: TabularProblem, seed: int) -> None:
        super().reset(problem, seed)
        self.rounds: list[list[int]] = []  # trial ids screened per round
        self.round_of: dict[int, int] = {}  # trial id -> its round
        self.reported: list[int] = []  # screens reported per round
        self.pending: list[int] = []  # trial ids chosen for full training, not resumed yet

    def suggest(self, history: History) -> int:
        if not self.rounds or len(self.rounds[-1]) == self.n_screen:
            self.rounds.append([])
            self.reported.append(0)
        self.round_of[len(history.trials)] = len(self.rounds) - 1
        self.rounds[-1].append(len(history.trials))
        return random_remaining(history, self.generator)

    def should_stop(self, history: History, trial: Trial) -> bool:
        # Screens stop at their first report; resumed trials have more reports and run on.
        return len(trial.errors) == 1

    def on_finish(self, history: History, trial: Trial) -> None:
        if trial.status is not Status.STOPPED:
            return
        r = self.round_of[trial.trial_id]
        self.reported[r] += 1
        screened = self.rounds[r]
        # A round is complete when full, or when it is the last one (no settings left).
        if self.reported[r] == len(screened) and (
            len(screened) == self.n_screen or len(history.remaining()) == 0
        ):
            ranked = sorted(screened, key=lambda t: history.trials[t].errors[0])
            self.pending += ranked[: self.top_k]

    def resume(self, history: History) -> int | None:
        return self.pending.pop(0) if self.pending else None


class OptunaTPEHyperband(Method):
    """Optuna's ``TPESampler`` with its ``HyperbandPruner``, driven by ask/tell.

    TPE samples a point in the unit cube (float parameters ``x0..x{d-1}`` in
    [0, 1]); the run trains the *nearest remaining setting* (Euclidean in the
    unit cube), and Optuna is told the sampled point's result (the usual way to
    put a continuous sampler on a finite table). Each checkpoint is reported
    with ``trial.report(error, step=epoch)``; a trial the pruner prunes is
    stopped and told as ``PRUNED``, a completed one with its final error.
    The sampler is seeded with the run's seed and uses the constant liar for
    the concurrently running trials. Optuna is an optional dependency
    (``pip install gpar-bo[bench]``).
    """

    name = "optuna_tpe_hyperband"

    def reset(self, problem: TabularProblem, seed: int) -> None:
        import optuna  # optional: imported here so the other methods work without it

        super().reset(problem, seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            # The pruner assigns Hyperband brackets by hashing the study name, so a
            # fixed name keeps runs reproducible (the default name is random).
            study_name=f"tabular-{seed}",
            direction="minimize",
            sampler=optuna.samplers.TPESampler(seed=seed, constant_liar=True),
            pruner=optuna.pruners.HyperbandPruner(
                min_resource=problem.checkpoints[0], max_resource=problem.epochs, reduction_factor=3
            ),
        )
        self.asked: dict[int, optuna.trial.Trial] = {}  # harness trial id -> Optuna trial

    def suggest(self, history: History) -> int:
        trial = self.study.ask()
        d = self.problem.X.shape[-1]
        x = torch.tensor(
            [trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(d)], dtype=torch.double
        )
        remaining = history.remaining()
        nearest = (self.problem.X[remaining] - x).norm(dim=-1).argmin()
        self.asked[len(history.trials)] = trial
        return int(remaining[nearest])

    def on_report(self, history: History, trial: Trial) -> None:
        self.asked[trial.trial_id].report(trial.errors[-1], step=trial.epochs)

    def should_stop(self, history: History, trial: Trial) -> bool:
        return self.asked[trial.trial_id].should_prune()

    def on_finish(self, history: History, trial: Trial) -> None:
        from optuna.trial import TrialState

        asked = self.asked.pop(trial.trial_id)
        if trial.status is Status.COMPLETED:
            self.study.tell(asked, trial.errors[-1])
        else:
            self.study.tell(asked, state=TrialState.PRUNED)


def optuna_available() -> bool:
    """Whether the optional Optuna dependency is installed."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        return False
    return True


BASELINES: dict[str, type[Method]] = {
    "random": RandomSearch,
    "asha": ASHA,
    "one_epoch": OneEpochTopK,
    "optuna_tpe_hyperband": OptunaTPEHyperband,
}
