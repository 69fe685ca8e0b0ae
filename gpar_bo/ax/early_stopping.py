r"""``GPAREarlyStoppingStrategy``: stop trials GPAR thinks will not beat the incumbent.

For each running trial with enough progression, GPAR (conditioned on the trial's
observed prefix) gives the distribution of its value at the final checkpoint;
the trial is stopped when the probability that this value beats the incumbent
(the best final value among trials that reached the final checkpoint) is below
``threshold``.

GPAR is the package's learning-curve variant by default (D-GPAR-NL-X on log increments
of the metric, :mod:`gpar_bo.curve_model`), as in the freeze-thaw policy; its samples are
untransformed, so the comparison with the incumbent is in the metric's units. The
metric must then be non-negative (an error, a loss; an exact 0 is read as half the
smallest positive value, :func:`gpar_bo.curve_model.floor_zeros`); for one that can be
negative, pass
``gpar_options=curve_model_options(outcome_transform=None)`` (or other options).

The GPAR model is fitted on the finished curves (completed and early-stopped
trials) and refitted only when those change; running trials enter through
``GPARModel.condition_on_observations``, so each poll costs a posterior, not a fit.

Supported paths: ``Client.set_early_stopping_strategy`` then
``Client.should_stop_trial_early`` (you stop the run and call
``mark_trial_early_stopped``), or ``OrchestratorOptions(early_stopping_strategy=...)``
with a runner that implements ``stop``. ``Client.run_trials`` builds its own
``Orchestrator`` without the early-stopping strategy, so it never stops trials.

Ax's ``Client`` does not save its early-stopping strategy; ``GPARClient``
(:mod:`gpar_bo.ax.client`) stores it with the experiment, by its ``settings``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus
from ax.early_stopping.strategies.base import BaseEarlyStoppingStrategy
from ax.generation_strategy.generation_node import GenerationNode
from botorch.fit import fit_gpytorch_mll
from torch import Tensor

from gpar_bo.ax.checkpoints import Checkpoints
from gpar_bo.ax.curves import ExperimentCurves, experiment_curves, objective_metric
from gpar_bo.curve_model import LogIncrements, floor_zeros, resolve_gpar_options
from gpar_bo.data import MIN_OBSERVATIONS_PER_OUTPUT
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.refit import RefitSchedule

__all__ = ["GPAREarlyStoppingStrategy"]


class GPAREarlyStoppingStrategy(BaseEarlyStoppingStrategy):
    r"""Stop a trial when GPAR gives it little chance to beat the incumbent.

    Args:
        checkpoints: The steps (progressions) at which the objective is reported;
            the last is the final checkpoint.
        metric_name: The objective metric; if given, a mismatch with the
            experiment's objective is an error.
        threshold: Stop when ``P(final value beats the incumbent) < threshold``.
        min_progression: Only judge trials whose latest step is at least this
            (in the experiment's units, e.g. epochs).
        max_progression: Do not stop trials past this step.
        min_completed_trials: Trials that reached the final checkpoint before any
            stopping (at least 2, as GPAR needs two values of every output).
        num_samples: Monte Carlo samples of the final value.
        gpar_options: Keyword arguments for ``GPARModel``; None (default) is
            :func:`gpar_bo.curve_model.curve_model_options` (log increments of a
            non-negative metric: a value < 0 is an error when GPAR is fitted). Given
            options replace the default, they are not merged with it (``{}`` is
            ``GPARModel``'s own default: GPAR-L-NL on the raw metric).
        fit_kwargs: Keyword arguments for each conditional's ``fit_gpytorch_mll``.
        seed: Seed of the Monte Carlo samples (decisions are reproducible).
        refit_growth: Re-optimise GPAR's hyperparameters only once the number of
            finished curves exceeds the number at the last fit by this fraction;
            in between, a model on the new curves reuses the last fitted
            hyperparameters (no optimisation). 0 refits whenever a trial finishes.
    """

    def __init__(
        self,
        checkpoints: Checkpoints | Sequence[float],
        metric_name: str | None = None,
        threshold: float = 0.05,
        min_progression: float | None = None,
        max_progression: float | None = None,
        min_completed_trials: int = 2,
        num_samples: int = 512,
        gpar_options: Mapping[str, Any] | None = None,
        fit_kwargs: Mapping[str, Any] | None = None,
        seed: int = 0,
        refit_growth: float = 0.0,
    ) -> None:
        super().__init__(
            metric_signatures=None if metric_name is None else [metric_name],
            min_progression=min_progression,
            max_progression=max_progression,
            min_curves=max(min_completed_trials, MIN_OBSERVATIONS_PER_OUTPUT),
        )
        self.checkpoints = Checkpoints(checkpoints)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1); got {threshold}.")
        self.metric_name = metric_name
        self.min_completed_trials = min_completed_trials
        self.threshold = threshold
        self.num_samples = num_samples
        self.gpar_options = None if gpar_options is None else dict(gpar_options)
        self.fit_kwargs = dict(fit_kwargs or {})
        self.seed = seed
        self.refit_growth = refit_growth
        self._cache: tuple[tuple, GPARModel] | None = None
        self._refit = RefitSchedule(self._fit, refit_growth)

    def settings(self) -> dict[str, Any]:
        """The constructor's arguments: ``type(self)(**self.settings())`` is this
        strategy before it saw any data (for storage)."""
        return {
            "checkpoints": self.checkpoints.tolist(),
            "metric_name": self.metric_name,
            "threshold": self.threshold,
            "min_progression": self.min_progression,
            "max_progression": self.max_progression,
            "min_completed_trials": self.min_completed_trials,
            "num_samples": self.num_samples,
            "gpar_options": self.gpar_options,
            "fit_kwargs": self.fit_kwargs,
            "seed": self.seed,
            "refit_growth": self.refit_growth,
        }

    def _is_harmful(self, trial_indices: set[int], experiment: Experiment) -> bool:
        # The probability threshold is the safety margin; no extra gate.
        return False

    def _fit(self, model: GPARModel) -> None:
        fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), **self.fit_kwargs)

    def _finished_model(self, finished: ExperimentCurves) -> GPARModel:
        """GPAR on the finished curves, rebuilt only when they change (see
        ``refit_growth`` for when its hyperparameters are re-optimised)."""
        key = (tuple(finished.trial_indices), finished.Y.nan_to_num(-1e300).numpy().tobytes())
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        model = GPARModel(finished.X, finished.Y, output_names=self.checkpoints.tolist(),
                          **resolve_gpar_options(self.gpar_options))
        self._refit.fit_or_reload(model, len(finished.trial_indices))
        self._cache = (key, model)
        return model

    def final_value_samples(
        self,
        experiment: Experiment,
        trial_indices: Sequence[int] | None = None,
        curves: ExperimentCurves | None = None,
    ) -> tuple[dict[int, Tensor], float | None]:
        r"""GPAR samples of the final value of unfinished trials, and the incumbent.

        GPAR is fitted on the curves of the trials that are not running and
        conditioned on the running trials' prefixes; each trial's samples are
        conditioned on its own prefix.

        Args:
            experiment: The experiment.
            trial_indices: Trials to sample (default: every trial with data that
                has not reached the final checkpoint); trials without data or
                that reached the final checkpoint are skipped.
            curves: The experiment's curves of the objective at this strategy's
                checkpoints, if already built (``experiment_curves``).

        Returns:
            A mapping from trial index to a ``num_samples`` tensor of final values
            (with observation noise), and the incumbent (the best final value of
            a finished trial). Both are empty/None while fewer than
            ``min_completed_trials`` trials have reached the final checkpoint.

        Raises:
            ValueError: The objective is not ``metric_name``, the data has no
                progression, reported steps are not the checkpoints, or ``curves``
                are of another metric or other checkpoints.
        """
        name, minimize = objective_metric(experiment, self.metric_name)
        if curves is None:
            curves = experiment_curves(experiment, name, self.checkpoints)
        elif (curves.metric_name, curves.checkpoints) != (name, self.checkpoints):
            raise ValueError(
                f"The curves are of {curves.metric_name!r} at {curves.checkpoints.tolist()}; "
                f"this strategy models {name!r} at {self.checkpoints.tolist()}."
            )
        curves = curves.select(curves.lengths > 0)
        reached = curves.lengths == len(self.checkpoints)
        running = torch.tensor(
            [s == TrialStatus.RUNNING for s in curves.statuses], dtype=torch.bool
        )
        values = curves.Y
        if isinstance(resolve_gpar_options(self.gpar_options).get("outcome_transform"), LogIncrements):
            values = floor_zeros(values)  # a 0 as the model reads it: its samples are > 0
        finished_finals = values[reached & ~running, -1]
        if len(finished_finals) < (self.min_curves or MIN_OBSERVATIONS_PER_OUTPUT):
            return {}, None
        incumbent = float(finished_finals.min() if minimize else finished_finals.max())
        wanted = ~reached
        if trial_indices is not None:
            asked = set(trial_indices)
            wanted &= torch.tensor([t in asked for t in curves.trial_indices], dtype=torch.bool)
        if not wanted.any():
            return {}, incumbent
        model = self._finished_model(curves.select(~running))
        if running.any():
            live = curves.select(running)
            model = model.condition_on_observations(live.X, live.Y)
        candidates = curves.select(wanted)
        posterior = model.posterior(
            candidates.X.unsqueeze(-2),
            output_indices=[len(self.checkpoints) - 1],
            observation_noise=True,
        )
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            samples = posterior.rsample(torch.Size([self.num_samples]))[..., 0, 0]
        return dict(zip(candidates.trial_indices, samples.T.detach())), incumbent

    def probabilities_of_beating_incumbent(
        self,
        experiment: Experiment,
        trial_indices: Sequence[int] | None = None,
        curves: ExperimentCurves | None = None,
    ) -> dict[int, float]:
        r"""``P(final value beats the incumbent)`` of running trials under GPAR.

        Args:
            experiment: The experiment.
            trial_indices: Trials to evaluate (default: all running trials with
                data); trials that are not running are skipped.
            curves: The experiment's curves, if already built (see
                ``final_value_samples``).

        Returns:
            A mapping from trial index to probability; empty while fewer than
            ``min_completed_trials`` trials have reached the final checkpoint.
        """
        running = {t.index for t in experiment.trials_by_status[TrialStatus.RUNNING]}
        asked = running if trial_indices is None else running & set(trial_indices)
        samples, incumbent = self.final_value_samples(experiment, sorted(asked), curves)
        _, minimize = objective_metric(experiment, self.metric_name)
        return {
            index: float((s < incumbent if minimize else s > incumbent).double().mean())
            for index, s in samples.items()
        }

    def _should_stop_trials_early(
        self,
        trial_indices: set[int],
        experiment: Experiment,
        current_node: GenerationNode | None = None,
    ) -> dict[int, str | None]:
        """Trials to stop, each with the reason (probability vs threshold)."""
        name, _ = objective_metric(experiment, self.metric_name)
        data = experiment.lookup_data()
        # Built once per poll (this also validates steps and progression).
        curves = experiment_curves(experiment, name, self.checkpoints, data)
        if not curves.trial_indices:
            return {}
        df = data.full_df
        df = df[df["metric_name"] == name]
        eligible = []
        for index in sorted(trial_indices):
            ok, _ = self.is_eligible(trial_index=index, experiment=experiment, df=df)
            if ok:
                eligible.append(index)
        if not eligible:
            return {}
        probabilities = self.probabilities_of_beating_incumbent(experiment, eligible, curves)
        return {
            index: (
                f"GPAR's probability that the final {name} beats the incumbent is "
                f"{p:.3f} < {self.threshold}."
            )
            for index, p in probabilities.items()
            if p < self.threshold
        }
