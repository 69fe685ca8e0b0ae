r"""GPAR inside Ax's modular BoTorch generator, and the generation strategy factory.

Ax hands a BoTorch model one ``SupervisedDataset`` per metric. With learning-curve
data (``Data`` with a ``step`` column, loaded with
``DataLoaderConfig(latest_rows_per_group=None)``) each row is one checkpoint of one
run: ``X = [parameters..., step]``, ``Y = [value]``. Ax rescales ``step`` to [0, 1]
per metric, using the smallest and largest step in the data. ``GPARCurveModel``
undoes this: it maps each row's rescaled step back to a checkpoint index, checks
the result against the declared checkpoints, pivots the rows into GPAR's
``runs x checkpoints`` layout (NaN after a run's last checkpoint) and fits a
``GPARModel`` on it. Running and early-stopped trials thus enter as prefixes.

Queries carry a ``step`` column too; Ax fixes it to 1 (the largest step) when it
generates candidates, which is the final checkpoint once runs have reached it. The
model only fits when at least two runs have reached the final checkpoint, so the
acquisition always targets the final checkpoint: GPAR cannot extrapolate to an
output it has never observed, so before that the factory keeps generating Sobol
points (see ``gpar_generation_strategy``).

GPAR is the package's learning-curve variant by default (D-GPAR-NL-X on log increments
of the metric, :mod:`gpar_bo.curve_model`), the one the freeze-thaw policy and early
stopping use. Its posterior is untransformed sample by sample, so the value at the final
checkpoint (a function of every increment) is in the metric's units before Ax scalarises
it. The log needs the metric's own, non-negative values (a 0 read as half the smallest
positive one, :func:`gpar_bo.curve_model.floor_zeros`): Ax's ``StandardizeY`` is then left
out of the generator's transforms (each GPAR conditional standardises its own targets);
it stays for GPAR options without an outcome transform, which model the standardised
metric as before.

Importing this module registers ``GPARCurveModel`` with Ax's fitting dispatcher
(:mod:`gpar_bo.ax.storage` registers it for storage).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from ax.adapter.registry import MBM_X_trans, Generators
from ax.adapter.transforms.standardize_y import StandardizeY
from ax.core.data import MAP_KEY
from ax.core.data_utils import DataLoaderConfig
from ax.core.experiment_status import ExperimentStatus
from ax.core.trial_status import TrialStatus
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig, fit_botorch_model
from botorch.acquisition import AcquisitionFunction
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.fit import fit_gpytorch_mll
from botorch.models.model import Model
from botorch.posteriors import Posterior
from botorch.posteriors.transformed import TransformedPosterior
from botorch.utils.datasets import SupervisedDataset
from torch import Tensor

from gpar_bo.ax.checkpoints import Checkpoints
from gpar_bo.ax.curves import curve_table, curves_with_gaps, observed_checkpoints
from gpar_bo.curve_model import resolve_gpar_options
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel

__all__ = [
    "GPARCurveModel",
    "GPAR_NODE_NAME",
    "SOBOL_NODE_NAME",
    "gpar_generation_strategy",
]

SOBOL_NODE_NAME = "Sobol"
GPAR_NODE_NAME = "GPAR"

class _SelectedOutputPosterior(TransformedPosterior):
    """One output per point, picked from a multi-output GPAR posterior."""

    def _extended_shape(self, sample_shape: torch.Size = torch.Size()) -> torch.Size:  # noqa: B008
        return self._posterior._extended_shape(sample_shape)[:-1] + torch.Size([1])


class _PointwiseMomentsPosterior(TransformedPosterior):
    """Joint samples of one posterior, moments of another (point by point).

    Reads the moments through the transforms without asking the joint
    posterior for its own (which would cost an ``n x n`` computation).
    """

    @property
    def mean(self) -> Tensor:
        return self._mean_transform(None, None)

    @property
    def variance(self) -> Tensor:
        return self._variance_transform(None, None)


class GPARCurveModel(Model):
    r"""GPAR on Ax's learning-curve rows: a one-output BoTorch model.

    Args:
        train_X: An ``n x (d + 1)`` tensor of Ax's training rows: the parameters
            and, at column ``step_index``, the step rescaled to [0, 1].
        train_Y: An ``n x 1`` tensor of the metric at those rows.
        checkpoints: The M steps (e.g. epochs) at which the metric is reported;
            GPAR's outputs, in order.
        step_index: The column of ``train_X`` holding the step.
        gpar_options: Keyword arguments for ``GPARModel`` (e.g. ``kernel``,
            ``markov``, ``denoise``); None (default) is
            :func:`gpar_bo.curve_model.curve_model_options`. Given options replace
            the default (``{}`` is ``GPARModel``'s own default).

    Rows with equal parameters (one configuration run in several trials) are
    merged into one run, averaging values at the same checkpoint.
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        checkpoints: Checkpoints | Sequence[float],
        step_index: int,
        gpar_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if train_Y.dim() != 2 or train_Y.shape[-1] != 1:
            raise ValueError(f"train_Y must be `n x 1`; got {tuple(train_Y.shape)}.")
        self.checkpoints = checkpoints = Checkpoints(checkpoints)
        self.step_index = step_index % train_X.shape[-1]
        self.gpar_options = None if gpar_options is None else dict(gpar_options)
        self.train_X, self.train_Y = train_X, train_Y
        steps = checkpoints.rescaled_indices(train_X[:, self.step_index])
        configs, run = self._without_step(train_X).unique(dim=0, return_inverse=True)
        curves = curve_table(run, steps, train_Y[:, 0], len(configs), len(checkpoints))
        gaps = curves_with_gaps(curves)
        options = resolve_gpar_options(self.gpar_options)
        if gaps and not options.get("impute", False):
            raise ValueError(
                f"{len(gaps)} trial(s) reported after skipping a checkpoint (e.g. at "
                f"{observed_checkpoints(curves[gaps[0]], checkpoints)} of "
                f"{checkpoints.tolist()}; a trial completed without progression data reports "
                "only its last step). GPAR needs every checkpoint up to a trial's last: "
                "report each one, or pass gpar_options={'impute': True}."
            )
        self.gpar = GPARModel(configs, curves, output_names=checkpoints.tolist(), **options)

    @classmethod
    def construct_inputs(
        cls,
        training_data: SupervisedDataset,
        checkpoints: Checkpoints | Sequence[float],
        metric_name: str | None = None,
        gpar_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Model arguments from Ax's dataset of one learning-curve metric.

        Raises:
            ValueError: The data has no progression (``step``) column, holds
                several metrics, or is not of ``metric_name``.
        """
        if kwargs:
            raise ValueError(
                f"GPARCurveModel does not support {sorted(kwargs)} (e.g. categorical, "
                "fidelity or task parameters); use range parameters."
            )
        outcomes = list(training_data.outcome_names)
        if len(outcomes) != 1:
            raise ValueError(f"GPARCurveModel models one metric at a time; got {outcomes}.")
        if metric_name is not None and outcomes[0] != metric_name:
            raise ValueError(
                f"GPAR was configured for metric {metric_name!r} but Ax asks it to model "
                f"{outcomes[0]!r}: make the objective metric {metric_name!r} (or pass "
                f"metric_name={outcomes[0]!r})."
            )
        if MAP_KEY not in training_data.feature_names:
            raise ValueError(
                f"Metric {outcomes[0]!r} has no progression data: GPAR needs learning "
                f"curves, i.e. data attached with a progression (the {MAP_KEY!r} column, "
                "e.g. `client.attach_data(trial, {...}, progression=epoch)`) at two or "
                "more distinct checkpoints."
            )
        return {
            "train_X": training_data.X,
            "train_Y": training_data.Y,
            "checkpoints": checkpoints,
            "step_index": training_data.feature_names.index(MAP_KEY),
            "gpar_options": gpar_options,
        }

    @property
    def num_outputs(self) -> int:
        return 1

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size()

    def _without_step(self, X: Tensor) -> Tensor:
        """``X`` without its step column: ``... x d``."""
        keep = [i for i in range(X.shape[-1]) if i != self.step_index]
        return X[..., keep]

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> Posterior:
        r"""The posterior of the metric at the checkpoint each row of ``X`` asks for.

        Args:
            X: A ``batch_shape x q x (d + 1)`` tensor; the step column (rescaled as
                in training, 1 = final checkpoint) picks the checkpoint. A point
                equal to a training run's parameters is conditioned on that run's
                observed prefix (so running trials are judged by what they showed).
            output_indices: Must be None or ``[0]`` (one metric).
            observation_noise: Whether to include observation noise.
            posterior_transform: E.g. Ax's ``ScalarizedPosteriorTransform``.

        Returns:
            A posterior over ``batch_shape x q x 1``. For an ``n x (d + 1)`` ``X``
            (Ax's predictions and analyses, with n up to thousands) ``mean`` and
            ``variance`` are computed point by point, as a joint computation over
            n points would need ``n x n`` covariances per sample path.
        """
        if output_indices not in (None, [0]):
            raise ValueError(f"GPARCurveModel has one output; got {output_indices}.")
        args = (observation_noise, posterior_transform)
        joint = self._posterior(X, *args)
        if X.dim() == 2 and X.shape[0] > 1:
            pointwise = self._posterior(X.unsqueeze(-2), *args)
            return _PointwiseMomentsPosterior(
                joint,
                sample_transform=lambda samples: samples,
                mean_transform=lambda mean, variance: pointwise.mean.squeeze(-2),
                variance_transform=lambda mean, variance: pointwise.variance.squeeze(-2),
            )
        return joint

    def _posterior(
        self,
        X: Tensor,
        observation_noise: bool | Tensor,
        posterior_transform: PosteriorTransform | None,
    ) -> Posterior:
        """``posterior`` for one X (joint over its q points)."""
        index, ok = self.checkpoints.match(X[..., self.step_index], rescaled=True)
        if not ok.all():
            bad = X[..., self.step_index][~ok].unique().tolist()[:5]
            raise ValueError(
                f"Steps {bad} (rescaled) are not checkpoints {self.checkpoints.tolist()}."
            )
        x = self._without_step(X)
        if (index == index.reshape(-1)[0]).all():
            # One checkpoint for all points (always so in acquisition): joint samples.
            return self.gpar.posterior(
                x,
                output_indices=[int(index.reshape(-1)[0])],
                observation_noise=observation_noise,
                posterior_transform=posterior_transform,
            )
        inner = self.gpar.posterior(
            x,
            output_indices=list(range(int(index.max()) + 1)),
            observation_noise=observation_noise,
        )
        if posterior_transform is not None and not isinstance(
            posterior_transform, ScalarizedPosteriorTransform
        ):
            raise NotImplementedError(
                "Points at different checkpoints support only scalarised transforms."
            )

        def select(values: Tensor) -> Tensor:
            picked = values.gather(-1, index.expand(values.shape[:-1]).unsqueeze(-1))
            if posterior_transform is None:
                return picked
            return picked * posterior_transform.weights.to(picked) + posterior_transform.offset

        def select_variance(mean: Tensor, variance: Tensor) -> Tensor:
            picked = variance.gather(-1, index.expand(variance.shape[:-1]).unsqueeze(-1))
            if posterior_transform is None:
                return picked
            return picked * posterior_transform.weights.to(picked) ** 2

        return _SelectedOutputPosterior(
            inner,
            sample_transform=select,
            mean_transform=lambda mean, variance: select(mean),
            variance_transform=select_variance,
        )

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, keep_transforms: bool = False
    ) -> Any:
        """Load GPAR's hyperparameters; transforms stay those of this model's data.

        Ax reloads a fitted model's state into a model built on other data without
        refitting (e.g. cross-validation folds), so by default the state's
        data-derived entries are not loaded, and ``GPARModel.load_state_dict``
        recomputes the inputs that depend on the hyperparameters (``denoise``,
        ``impute``).
        """
        prefix = "gpar."
        inner = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        if strict and len(inner) != len(state_dict):
            unexpected = next(k for k in state_dict if not k.startswith(prefix))
            raise RuntimeError(f"Unexpected key {unexpected!r} in GPARCurveModel's state.")
        return self.gpar.load_state_dict(inner, strict=strict, keep_transforms=keep_transforms)


@fit_botorch_model.register(GPARCurveModel)
def _fit_gpar_curve_model(
    model: GPARCurveModel,
    mll_class: Any = None,
    mll_options: dict[str, Any] | None = None,
) -> None:
    """Ax's fitting hook: GPAR fits its conditionals one by one.

    ``mll_class`` is unused (each conditional uses its exact marginal likelihood);
    ``mll_options`` (the ``ModelConfig``'s) go to every conditional's
    ``fit_gpytorch_mll``, e.g. ``{"optimizer_kwargs": {"options": {"maxiter": 100}}}``.
    """
    fit_gpytorch_mll(
        GPARMarginalLogLikelihood(model.gpar.likelihood, model.gpar), **(mll_options or {})
    )


def gpar_generation_strategy(
    checkpoints: Checkpoints | Sequence[float],
    *,
    metric_name: str | None = None,
    num_sobol_trials: int = 5,
    min_completed_trials: int = 2,
    gpar_options: Mapping[str, Any] | None = None,
    botorch_acqf_class: type[AcquisitionFunction] | None = None,
    fit_kwargs: Mapping[str, Any] | None = None,
    acqf_optimizer_kwargs: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> GenerationStrategy:
    r"""Sobol initialisation, then GPAR in Ax's modular BoTorch generator.

    Pass the result to ``Client.set_generation_strategy`` or an ``Orchestrator``.
    The GPAR node sees every reported checkpoint of running, completed and
    early-stopped trials and targets the final checkpoint.

    Args:
        checkpoints: The steps (``progression`` values, e.g. epochs) at which the
            objective metric is reported; the last is the target.
        metric_name: The objective metric; if given, a mismatch is an error.
        num_sobol_trials: Sobol trials before GPAR takes over.
        min_completed_trials: COMPLETED trials (with data) needed before GPAR
            takes over, at least 2: each GPAR output, including the final
            checkpoint, needs two observations. Until then Sobol continues, so
            parallel workers stay busy while the first runs finish.
        gpar_options: Keyword arguments for ``GPARModel`` (``kernel``, ``markov``,
            ``denoise``, ...); None (default) is
            :func:`gpar_bo.curve_model.curve_model_options`, log increments of a
            non-negative metric (a value < 0 is an error when GPAR is fitted; pass
            ``curve_model_options(outcome_transform=None)`` for such a metric).
            Given options replace the default, they are not merged with it
            (``{}`` is ``GPARModel``'s own default, GPAR-L-NL on the metric
            standardised by Ax).
        botorch_acqf_class: Acquisition function; Ax's default (qLogNEI for one
            objective) if None.
        fit_kwargs: Keyword arguments for each conditional's ``fit_gpytorch_mll``
            (e.g. ``{"optimizer_kwargs": {"options": {"maxiter": 100}}}`` for speed).
        acqf_optimizer_kwargs: Keyword arguments for BoTorch's ``optimize_acqf``
            (e.g. ``{"num_restarts": 4, "raw_samples": 128}``); Ax's defaults if None.
            The ``options`` keys depend on the optimiser Ax picks: ``maxiter`` for
            continuous search spaces, ``maxiter_alternating`` etc. with integer
            parameters (BoTorch's ``optimize_acqf_mixed_alternating``).
        seed: Seed of the Sobol sequence.

    Returns:
        A ``GenerationStrategy`` with nodes ``"Sobol"`` and ``"GPAR"``.
    """
    checkpoints = Checkpoints(checkpoints)
    transforms_outcomes = resolve_gpar_options(gpar_options).get("outcome_transform") is not None
    if min_completed_trials < 2:
        raise ValueError("min_completed_trials must be >= 2 (GPAR needs two final values).")
    sobol = GenerationNode(
        name=SOBOL_NODE_NAME,
        generator_specs=[
            GeneratorSpec(generator_enum=Generators.SOBOL, generator_kwargs={"seed": seed})
        ],
        transition_criteria=[
            MinTrials(
                threshold=num_sobol_trials,
                transition_to=GPAR_NODE_NAME,
                not_in_statuses=[TrialStatus.FAILED, TrialStatus.ABANDONED],
                use_all_trials_in_exp=True,
            ),
            MinTrials(
                threshold=min_completed_trials,
                transition_to=GPAR_NODE_NAME,
                only_in_statuses=[TrialStatus.COMPLETED],
                count_only_trials_with_data=True,
                use_all_trials_in_exp=True,
            ),
        ],
        should_deduplicate=True,
        suggested_experiment_status=ExperimentStatus.INITIALIZATION,
    )
    model_config = ModelConfig(
        botorch_model_class=GPARCurveModel,
        model_options={
            "checkpoints": checkpoints.tolist(),  # JSON-native for storage
            "metric_name": metric_name,
            # None stands for the default (stored as such: JSON-native).
            "gpar_options": None if gpar_options is None else dict(gpar_options),
        },
        # GPARModel normalises each conditional's inputs itself.
        input_transform_classes=None,
        mll_options=dict(fit_kwargs or {}),
        name=GPAR_NODE_NAME,
    )
    generator_kwargs: dict[str, Any] = {
        "surrogate_spec": SurrogateSpec(model_configs=[model_config]),
        # Every checkpoint of every trial, not only each curve's latest value.
        "data_loader_config": DataLoaderConfig(
            latest_rows_per_group=None, fit_only_completed_map_metrics=False
        ),
        # Model only the objective; tracking metrics need no GPAR.
        "fit_tracking_metrics": False,
        # Ax's default Y transforms minus Winsorize (which would clip the high
        # early-checkpoint values as outliers) and the transforms for relative or
        # constraint metrics; standardisation is affine, so curves keep their shape.
        # A GPAR outcome transform (log increments) needs the metric's own values.
        "transforms": [*MBM_X_trans] if transforms_outcomes else [*MBM_X_trans, StandardizeY],
    }
    if botorch_acqf_class is not None:
        generator_kwargs["botorch_acqf_class"] = botorch_acqf_class
    gen_kwargs: dict[str, Any] = {}
    if acqf_optimizer_kwargs is not None:
        gen_kwargs["model_gen_options"] = {"optimizer_kwargs": dict(acqf_optimizer_kwargs)}
    gpar = GenerationNode(
        name=GPAR_NODE_NAME,
        generator_specs=[
            GeneratorSpec(
                generator_enum=Generators.BOTORCH_MODULAR,
                generator_kwargs=generator_kwargs,
                generator_gen_kwargs=gen_kwargs,
            )
        ],
        should_deduplicate=True,
        suggested_experiment_status=ExperimentStatus.OPTIMIZATION,
    )
    return GenerationStrategy(name="Sobol+GPAR", nodes=[sobol, gpar])
