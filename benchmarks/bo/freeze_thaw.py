"""The package's GPAR freeze-thaw policy as a method of the tabular harness.

Nothing of the policy is re-implemented here: ``gpar_bo.freeze_thaw.FreezeThawPolicy``
(with its defaults) makes every decision; this adapter only translates the harness's
history into the policy's tensors. Every run pauses at every checkpoint
(``should_stop``); a free worker asks the policy, which resumes a paused run or
starts a new setting among the remaining ones (the policy scores a random subset
of them per decision, ``num_candidates``).
"""

from __future__ import annotations

import torch

from benchmarks.bo.harness import History, Method, Status, TabularProblem, Trial
from gpar_bo.curve_model import curve_model_options
from gpar_bo.freeze_thaw import FreezeThawPolicy

__all__ = [
    "GPARFreezeThaw", "GPARFreezeThawConverged", "GPARFreezeThawFullRefits", "GPARFreezeThawInitialStarts",
    "GPARFreezeThawLatentPaths", "GPARFreezeThawLogDraws", "GPARFreezeThawMeasured",
    "GPARFreezeThawMeasuredInitialStarts", "GPARFreezeThawMeasuredStaged", "GPARFreezeThawNoHorizon",
    "GPARFreezeThawOutputRefits", "GPARFreezeThawPendingFinals", "GPARFreezeThawPoint", "GPARFreezeThawPrevious",
    "GPARFreezeThawRandomResumes",
    "GPARFreezeThawScreened", "GPARFreezeThawWarmUpHalving", "GPARFreezeThawWarmUpPushes",
]


class GPARFreezeThaw(Method):
    """Freeze-thaw with ``FreezeThawPolicy``: pause every run, resume or start by its index,
    told the epochs each worker has left of the budget (as ``gpar-bo tune`` tells it)."""

    name = "gpar_freeze_thaw"
    #: Tell the policy the epochs each worker has left (``decide(epochs_left=...)``).
    budget_aware = True

    def __init__(self, **policy_options) -> None:
        """``policy_options``: ``FreezeThawPolicy`` arguments (default: its defaults)."""
        self.policy_options = policy_options

    def reset(self, problem: TabularProblem, seed: int) -> None:
        super().reset(problem, seed)
        self.policy = FreezeThawPolicy(problem.checkpoints, seed=seed, **self.policy_options)
        self._next: int | None = None
        self.reasons: list[str] = []

    def should_stop(self, history: History, trial: Trial) -> bool:
        return True  # pause at every checkpoint; the next decision may resume it at once

    def resume(self, history: History) -> int | None:
        trials = history.trials
        X = self.problem.X[[t.setting for t in trials]]
        Y = torch.full((len(trials), len(self.problem.checkpoints)), float("nan"), dtype=X.dtype)
        for row, t in enumerate(trials):
            Y[row, : len(t.errors)] = torch.tensor(t.errors, dtype=X.dtype)
        paused = torch.tensor([t.status is Status.STOPPED for t in trials], dtype=torch.bool)
        remaining = history.remaining()
        decision = self.policy.decide(
            X, Y, paused, candidates=self.problem.X[remaining],
            epochs_left=history.epochs_left() if self.budget_aware else None,
        )
        self.reasons.append(decision.reason)
        if decision.action == "resume":
            return trials[decision.index].trial_id
        self._next = int(remaining[decision.index])
        return None

    def suggest(self, history: History) -> int:
        setting, self._next = self._next, None
        if setting is None:  # only if the harness asks without a decision
            remaining = history.remaining()
            setting = int(remaining[torch.randint(len(remaining), (1,), generator=self.generator)])
        return setting


class GPARFreezeThawNoHorizon(GPARFreezeThaw):
    """The policy as it was before it was told the budget (2026-11-29): no
    ``epochs_left``, so near the end of the budget it may train runs the budget cuts off.
    Kept so that the runs measured with it stay labelled and reproducible; the other
    labelled variants below were measured without a horizon too, so they derive from it."""

    name = "gpar_freeze_thaw_no_horizon"
    budget_aware = False


class GPARFreezeThawMeasured(GPARFreezeThawNoHorizon):
    """The policy as its runs were measured (full refits, ``staged_refits=False``), told
    the table's measurement noise, with point estimates of the hyperparameters (as it was
    measured): its curve model is ``curve_model_options(measurement_noise=
    problem.measurement_noise, hyperparameter_draws=0)`` (a candidate, see
    ``results/calibration_diagnosis.md``)."""

    name = "gpar_freeze_thaw_measured"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"staged_refits": False, **policy_options})

    def reset(self, problem: TabularProblem, seed: int) -> None:
        _tell_measurement_noise(self, problem, hyperparameter_draws=0)
        super().reset(problem, seed)


class GPARFreezeThawMeasuredStaged(GPARFreezeThawMeasured):
    """The default as it was before it was told the budget (staged refits, no horizon)
    told the table's measurement noise (a candidate: does a model that knows the noise
    choose truly better settings, rather than settings whose last epoch was lucky?)."""

    name = "gpar_freeze_thaw_measured_staged"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"staged_refits": True, **policy_options})


class GPARFreezeThawFullRefits(GPARFreezeThawNoHorizon):
    """The policy as it was before staged refits became its default: each refit
    fits all conditionals in one decision (``staged_refits=False``), with point
    estimates of the hyperparameters. Kept so that the runs measured with it stay
    labelled and reproducible."""

    name = "gpar_freeze_thaw_full_refits"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"staged_refits": False,
                            "gpar_options": curve_model_options(hyperparameter_draws=0), **policy_options})


class GPARFreezeThawPoint(GPARFreezeThawNoHorizon):
    """The policy as it was before its curve model predicted over hyperparameter draws
    (2026-11-29): point estimates, ``curve_model_options(hyperparameter_draws=0)``. Kept
    so that the runs measured with it stay labelled and reproducible."""

    name = "gpar_freeze_thaw_point"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"gpar_options": curve_model_options(hyperparameter_draws=0), **policy_options})


class GPARFreezeThawPrevious(GPARFreezeThawNoHorizon):
    """A candidate: the policy with each later conditional's noise prior's mode at the
    previous conditional's noise, ``curve_model_options(noise_prior="previous")``
    (``gpar_bo.conditionals.center_noise_prior``), without a horizon, as it was measured
    (compare it with ``gpar_freeze_thaw_no_horizon``). Not the default."""

    name = "gpar_freeze_thaw_previous"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"gpar_options": curve_model_options(noise_prior="previous"), **policy_options})


class GPARFreezeThawScreened(GPARFreezeThaw):
    """A candidate: the default (told the epochs left) scoring paused runs as it scores new
    settings, ``paused_scoring="screen"``: every decision screens the paused runs (all of
    them, or a random ``num_candidates`` when there are more) with a
    quarter of the paths and scores the best few with all of them, instead of rescoring
    stored indices lazily (a stored index goes stale as data arrive). Not the default."""

    name = "gpar_freeze_thaw_screened"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"paused_scoring": "screen", **policy_options})


class GPARFreezeThawOutputRefits(GPARFreezeThaw):
    """A candidate: the default (told the epochs left) refitting each conditional when its
    own training rows grew by ``refit_growth``, ``refit_trigger="output"``, instead of all
    of them when the total grew: the late conditionals, fitted on the few runs that reached
    them, are otherwise decided on with fits from far fewer runs (``benchmarks.fit_staleness``).
    Not the default."""

    name = "gpar_freeze_thaw_output_refits"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"refit_trigger": "output", **policy_options})


class GPARFreezeThawInitialStarts(GPARFreezeThaw):
    """A candidate: the default (told the epochs left) whose refits, warm-started from the
    last fit, also start each small conditional from the model's initial values and keep
    the better fit, ``fit_kwargs={"start_from_initial": True}`` (``GPARModel.custom_fit``):
    a warm start can stay in an optimum of fewer rows (``benchmarks.fit_staleness``).
    Not the default."""

    name = "gpar_freeze_thaw_initial_starts"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"fit_kwargs": {"start_from_initial": True}, **policy_options})


class GPARFreezeThawLatentPaths(GPARFreezeThaw):
    """A candidate: the default (told the epochs left) whose index builds its paths from
    latent increments and adds the final's observation noise once,
    ``FreezeThawPolicy(latent_paths=True)``. By default a path's noise adds up over the
    checkpoints left, which widens the reward's spread for runs far from the end and for
    new settings, while the index means to leave noise out of the reward. Not the default."""

    name = "gpar_freeze_thaw_latent_paths"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"latent_paths": True, **policy_options})


class GPARFreezeThawRandomResumes(GPARFreezeThaw):
    """A candidate: the default that resumes a paused run drawn at random by one checkpoint
    in a twentieth of its decisions, ``FreezeThawPolicy(random_resume_fraction=0.05)``, so
    that GPAR's conditionals also learn how the runs it leaves paused go on. Not the
    default."""

    name = "gpar_freeze_thaw_random_resumes"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"random_resume_fraction": 0.05, **policy_options})


#: L-BFGS-B tolerances at which the conditionals' fits converge to their optimum instead of
#: stopping on a slow stretch (``benchmarks.fit_sensitivity``): SciPy's ``ftol`` and
#: ``gtol`` far below the model's defaults.
CONVERGED_FIT = {"optimizer_kwargs": {"options": {"ftol": 1e-12, "gtol": 1e-9}}}


class GPARFreezeThawConverged(GPARFreezeThaw):
    """A candidate: the default whose fits run to convergence, ``fit_kwargs=CONVERGED_FIT``.
    At the model's tolerances a fit stops where L-BFGS-B stalls on a flat stretch, which
    moves with rounding: the same data on two machines give other predictives
    (``benchmarks.fit_sensitivity``); the Laplace draws are then taken around a point that
    is not an optimum. Not the default."""

    name = "gpar_freeze_thaw_converged"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"fit_kwargs": CONVERGED_FIT, **policy_options})


class GPARFreezeThawLogDraws(GPARFreezeThaw):
    """A candidate: the default whose hyperparameter draws are taken in log units for every
    scale and hold directions the posterior leaves open,
    ``curve_model_options(draw_scales="log")`` (``gpar_bo.laplace``): in raw softplus
    coordinates a switched-off component's outputscale is drawn over hundreds of units.
    Not the default."""

    name = "gpar_freeze_thaw_log_draws"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"gpar_options": curve_model_options(draw_scales="log"), **policy_options})


class GPARFreezeThawPendingFinals(GPARFreezeThaw):
    """A candidate: the default scoring runs against the incumbent the runs other workers
    are training to their final checkpoint will leave, ``FreezeThawPolicy(pending_finals=True)``
    (``FreezeThawIndex``'s ``pending``): against today's incumbent a second-tier run looks
    worth finishing while a leader is about to finish below it. Not the default."""

    name = "gpar_freeze_thaw_pending_finals"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"pending_finals": True, **policy_options})


class GPARFreezeThawWarmUpPushes(GPARFreezeThaw):
    """A candidate: the default whose warm-up pushes a screened run on every freed worker
    instead of screening random settings beside two pushed runs,
    ``FreezeThawPolicy(warm_up="push")``: before the first fit no choice is the model's,
    and most warm-up screens are never continued. Not the default."""

    name = "gpar_freeze_thaw_warm_up_pushes"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"warm_up": "push", **policy_options})


class GPARFreezeThawWarmUpHalving(GPARFreezeThaw):
    """A candidate: the default whose warm-up decides by asynchronous successive halving,
    ``FreezeThawPolicy(warm_up="halving")``, the rule the policy follows whenever it has no
    model: a run is pushed on when it stands in the top ``1/eta`` (a third) of the values
    recorded so far at its checkpoint, and screening goes on while no paused run does. Not
    the default."""

    name = "gpar_freeze_thaw_warm_up_halving"

    def __init__(self, **policy_options) -> None:
        super().__init__(**{"warm_up": "halving", **policy_options})


class GPARFreezeThawMeasuredInitialStarts(GPARFreezeThawInitialStarts):
    """A candidate: ``gpar_freeze_thaw_initial_starts`` told the table's measurement noise,
    ``curve_model_options(measurement_noise=problem.measurement_noise)`` (hyperparameter
    draws kept, as in the default). The measured-noise variants above decided with a
    final conditional stuck in such an optimum, so they had no fair test. Not the default."""

    name = "gpar_freeze_thaw_measured_initial_starts"

    def reset(self, problem: TabularProblem, seed: int) -> None:
        _tell_measurement_noise(self, problem)
        super().reset(problem, seed)


def _tell_measurement_noise(method: GPARFreezeThaw, problem: TabularProblem, **curve_options) -> None:
    """Set ``method``'s curve model to ``curve_model_options(measurement_noise=
    problem.measurement_noise, **curve_options)``; a table without one is an error."""
    if problem.measurement_noise is None:
        raise ValueError(f"{problem.name} records no measurement noise; {method.name} needs it.")
    method.policy_options = {
        **method.policy_options,
        "gpar_options": curve_model_options(measurement_noise=problem.measurement_noise, **curve_options),
    }
