r"""GPAR as a BoTorch ``Model``.

GPAR (Requeima et al., AISTATS 2019) factorises the outputs by the product
rule, ``p(y_1..y_M | x) = prod_m p(y_m | y_1..y_{m-1}, x)``, and models each
conditional with its own single-output GP whose inputs are ``x`` joined with
the earlier outputs. For learning curves, output m is the validation error at
checkpoint m; a run that stopped early contributes its observed prefix, and
conditional m trains on the runs that reached checkpoint m. Learning is M
decoupled GP regressions (``O(M N^3)``); prediction samples the conditionals
in sequence (``GPARPosterior``).

Example:
    >>> model = GPARModel(train_X, train_Y, output_names=[1, 5, 11, 16, 21])
    >>> fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
    >>> samples = model.posterior(X).rsample(torch.Size([128]))  # 128 x b x q x 5
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from copy import deepcopy
from itertools import chain
from typing import Any

import torch
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.input import Normalize
from botorch.models.transforms.outcome import OutcomeTransform, Standardize
from botorch.models.utils.gpytorch_modules import (
    MIN_INFERRED_NOISE_LEVEL,
    get_gaussian_likelihood_with_lognormal_prior,
)
from botorch.posteriors import Posterior
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import InducingPointKernel
from gpytorch.likelihoods import GaussianLikelihood, Likelihood
from gpytorch.means import ZeroMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.settings import lazily_evaluate_kernels
from torch import Tensor
from torch.nn import ModuleList
from torch.quasirandom import SobolEngine

from gpar_bo.data import check_inputs, check_training_data, resolve_output_names
from gpar_bo.kernels import Conventions, KernelFamily, conditional_kernel
from gpar_bo.posterior import GPARPosterior, SharedBlockCache, same_tensors
from gpar_bo.prediction import ConditionalPredictor, output_scaling


#: Conditionals with more training rows than this use inducing points by default.
SPARSE_ABOVE = 1000
#: Inducing points per conditional when they are switched on automatically.
DEFAULT_NUM_INDUCING = 256

#: L-BFGS-B's relative tolerance on the loss (BoTorch's mll is per data point) for
#: the conditionals' fits. At SciPy's default (2.2e-9) the later conditionals of
#: learning-curve data run for very many iterations, shrinking a redundant kernel's
#: scale or the noise towards zero for log-evidence gains that do not improve
#: predictions. It is a trade-off, not free: it can also stop a fit during a slow
#: stretch that later pays off (the exchange-rate benchmark,
#: ``benchmarks/results/exchange.md``, reports both tolerances). Pass
#: ``optimizer_kwargs={"options": {"ftol": ...}}`` to override, and compare
#: ``conditional_log_evidences()`` when in doubt.
FIT_FTOL = 1e-6


class GPARModel(Model):
    r"""Gaussian Process Autoregressive Regression over M ordered outputs.

    Args:
        train_X: An ``n x d`` tensor of training inputs.
        train_Y: An ``n x M`` tensor of training outputs, NaN where a row has
            not (yet) observed an output. Must be closed downwards (each row
            observes a prefix of the outputs) unless ``impute=True``.
        output_names: Optional names of the M outputs (e.g. checkpoint epochs).
        kernel: The kernel family of table 2 of the paper: "L", "NL", "L-NL"
            (default) or "NL-X" (see ``KernelFamily``).
        markov: If given, conditional m sees only the last ``markov`` earlier
            outputs; ``markov=0`` gives independent GPs (the IGP baseline).
        impute: Allow data that is not closed downwards: missing earlier
            outputs of a row are filled with the posterior mean of their
            conditional, as in the paper (training becomes approximate).
        denoise: D-GPAR: earlier outputs enter later conditionals as the
            earlier conditionals' posterior means (latent values), in training
            and in prediction, instead of the noisy observations.
        use_rbf_kernel: EQ kernel on x (default) or Matern-5/2.
        outcome_transform: An optional elementwise outcome transform applied
            to ``train_Y`` before modelling (e.g. ``Log()`` for error rates);
            the posterior is untransformed by sampling. Each conditional also
            standardises its own targets.
        num_inducing: Fit every conditional with the variational inducing-point
            method of Titsias (2009) (GPyTorch's ``InducingPointKernel``, the
            collapsed SGPR bound) with this many inducing points. By default a
            conditional with more than ``SPARSE_ABOVE`` (1,000) training rows
            uses ``DEFAULT_NUM_INDUCING`` (256), the others are exact. As in the
            paper, inducing inputs are fixed and regularly spaced in x (a grid
            for one input, a Sobol sequence otherwise) and, for the earlier
            outputs, the earlier conditionals' posterior means at those x.
        learn_inducing_points: Optimise the inducing inputs with the
            hyperparameters instead.
        conventions: How each conditional GP is specified: "botorch" (default;
            ``SingleTaskGP``'s standardised targets, constant mean and priors) or
            "paper" (zero-mean GPs on the outputs as given, a variance on every
            kernel, maximum likelihood without priors, noise started at a tenth
            of the targets' variance), as in the paper's synthetic experiments
            and the authors' package with ``normalise_y=False``. See ``Conventions``.
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        output_names: Sequence[Hashable] | None = None,
        kernel: KernelFamily | str = KernelFamily.L_NL,
        markov: int | None = None,
        impute: bool = False,
        denoise: bool = False,
        use_rbf_kernel: bool = True,
        outcome_transform: OutcomeTransform | None = None,
        num_inducing: int | None = None,
        learn_inducing_points: bool = False,
        conventions: Conventions | str = Conventions.BOTORCH,
    ) -> None:
        super().__init__()
        # Everything but the data, to rebuild the model on more data.
        self._options = {
            "output_names": output_names,
            "kernel": kernel,
            "markov": markov,
            "impute": impute,
            "denoise": denoise,
            "use_rbf_kernel": use_rbf_kernel,
            "outcome_transform": outcome_transform,
            "num_inducing": num_inducing,
            "learn_inducing_points": learn_inducing_points,
            "conventions": conventions,
        }
        observed = check_training_data(train_X, train_Y, impute=impute)
        if markov is not None and markov < 0:
            raise ValueError(f"markov must be None or >= 0; got {markov}.")
        if num_inducing is not None and num_inducing < 1:
            raise ValueError(f"num_inducing must be None or >= 1; got {num_inducing}.")
        self.output_names = resolve_output_names(output_names, train_Y.shape[-1])
        self.kernel_family = KernelFamily(kernel)
        self.markov = markov
        self.impute = impute
        self.denoise = denoise
        self.use_rbf_kernel = use_rbf_kernel
        self.num_inducing = num_inducing
        self.learn_inducing_points = learn_inducing_points
        self.conventions = Conventions(conventions)
        self.train_X = train_X
        self.train_Y = train_Y
        self.observed = observed
        if outcome_transform is not None:
            outcome_transform.train()
            modelled_Y, _ = outcome_transform(train_Y)
            if not torch.isfinite(modelled_Y[observed]).all():
                raise ValueError(
                    "The outcome transform gives non-finite values for observed "
                    "outputs (e.g. Log of a non-positive error); GPAR needs an "
                    "elementwise transform that is finite on the data."
                )
            outcome_transform.eval()
            self.outcome_transform = outcome_transform
        else:
            modelled_Y = train_Y
        self.modelled_Y = modelled_Y
        # Values fed into later conditionals: observations, overwritten by
        # posterior means where imputing or denoising.
        self.fed_Y = modelled_Y.clone()
        self._cached_prediction: _PredictionCache | None = None
        self.conditionals = ModuleList()
        for m in range(self.num_outputs):
            self.conditionals.append(self._build_conditional(m))
            self._update_fed_values(m)

    # ------------------------------------------------------------------ shape
    @property
    def num_outputs(self) -> int:
        return self.train_Y.shape[-1]

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size()

    @property
    def likelihood(self) -> Likelihood:
        """The likelihood of the first conditional (for MLL constructors)."""
        return self.conditionals[0].likelihood

    def output_index(self, name: Hashable) -> int:
        """The position of the output called ``name`` (e.g. an epoch)."""
        try:
            return self.output_names.index(name)
        except ValueError:
            raise ValueError(
                f"Unknown output {name!r}; outputs are {self.output_names}."
            ) from None

    def window(self, m: int) -> list[int]:
        """The earlier outputs conditional ``m`` sees."""
        start = 0 if self.markov is None else max(0, m - self.markov)
        return list(range(start, m))

    # -------------------------------------------------------------- building
    def _conditional_inputs(self, m: int, rows: Tensor | slice = slice(None)) -> Tensor:
        return torch.cat([self.train_X[rows], self.fed_Y[rows][:, self.window(m)]], -1)

    def _build_conditional(self, m: int, reuse: SingleTaskGP | None = None) -> SingleTaskGP:
        """The GP of conditional ``m`` on the rows that observed output ``m``.

        ``reuse`` keeps an existing conditional's modules (hyperparameters)
        when only its inputs changed (imputed or denoised earlier outputs).
        """
        rows = self.observed[:, m]
        inputs = self._conditional_inputs(m, rows)
        targets = self.modelled_Y[rows, m : m + 1]
        window = self.window(m)
        num_inducing = self._num_inducing(len(targets))
        paper = self.conventions is Conventions.PAPER
        if reuse is not None:
            input_transform = reuse.input_transform
            covar_module, likelihood = reuse.covar_module, reuse.likelihood
            mean_module = reuse.mean_module
            if num_inducing and not self.learn_inducing_points:
                covar_module.inducing_points.data = self._inducing_inputs(
                    m, input_transform, num_inducing
                )
        else:
            input_transform = Normalize(
                d=inputs.shape[-1], bounds=self._input_bounds(window)
            )
            covar_module = conditional_kernel(
                self.kernel_family,
                x_dims=self.train_X.shape[-1],
                y_dims=len(window),
                use_rbf_kernel=self.use_rbf_kernel,
                conventions=self.conventions,
            )
            if paper:
                likelihood = _paper_likelihood(targets)
                mean_module = ZeroMean()
            else:
                likelihood = get_gaussian_likelihood_with_lognormal_prior()
                mean_module = None  # SingleTaskGP's constant mean
            if num_inducing:
                covar_module = InducingPointKernel(
                    covar_module,
                    inducing_points=self._inducing_inputs(m, input_transform, num_inducing),
                    likelihood=likelihood,
                )
                covar_module.inducing_points.requires_grad_(self.learn_inducing_points)
        gp = SingleTaskGP(
            inputs,
            targets,
            likelihood=likelihood,
            covar_module=covar_module,
            mean_module=mean_module,
            outcome_transform=None if paper else Standardize(m=1),
            input_transform=input_transform,
        )
        return gp.to(self.train_X)

    def _num_inducing(self, num_rows: int) -> int | None:
        if self.num_inducing is not None:
            return self.num_inducing
        return DEFAULT_NUM_INDUCING if num_rows > SPARSE_ABOVE else None

    def _inducing_inputs(self, m: int, input_transform: Normalize, num: int) -> Tensor:
        """Normalised inducing inputs of conditional ``m``: ``num x D``.

        Regularly spaced x in the data's box, joined with the plug-in
        posterior means of the earlier outputs at those x (the paper's recipe).
        """
        lower, upper = self.train_X.min(0).values, self.train_X.max(0).values
        d = self.train_X.shape[-1]
        if d == 1:
            unit = torch.linspace(0, 1, num, dtype=lower.dtype).unsqueeze(-1)
        else:
            unit = SobolEngine(d, scramble=True, seed=0).draw(num).to(lower)
        x = lower + (upper - lower) * unit
        means: list[Tensor] = []  # n x 1 plug-in means of outputs 0..m-1
        with torch.no_grad():
            for j in range(m):
                predictor = ConditionalPredictor(
                    self.conditionals[j], self._conditional_inputs(j, self.observed[:, j])
                )
                Z = torch.cat([x, *(means[i] for i in self.window(j))], -1)
                mean, _ = predictor(Z.unsqueeze(-2), joint=False)
                means.append(mean)
            inducing = torch.cat([x, *(means[j] for j in self.window(m))], -1)
            return input_transform(inducing)

    def _input_bounds(self, window: list[int]) -> Tensor:
        """Fixed normalisation bounds: the data range of x and of each output."""
        columns = [self.train_X] + [
            self.modelled_Y[self.observed[:, j], j : j + 1] for j in window
        ]
        lower = torch.cat([c.min(0).values for c in columns])
        upper = torch.cat([c.max(0).values for c in columns])
        # A constant column would divide by zero.
        upper = torch.where(upper > lower, upper, lower + 1.0)
        return torch.stack([lower, upper])

    def _update_fed_values(self, m: int) -> None:
        """Impute and/or denoise output ``m`` where later conditionals need it."""
        # Rows whose value at output m enters a later conditional.
        needed = self.observed[:, m:].any(-1) if self.impute else self.observed[:, m]
        rows = needed if self.denoise else needed & ~self.observed[:, m]
        if not rows.any():
            return
        gp = self.conditionals[m]
        predictor = ConditionalPredictor(gp, self._conditional_inputs(m, self.observed[:, m]))
        with torch.no_grad():
            mean, _ = predictor(self._conditional_inputs(m, rows).unsqueeze(-2), joint=False)
        self.fed_Y[rows, m] = mean.squeeze(-1)

    # ---------------------------------------------------------------- fitting
    def custom_fit(self, mll: Any = None, **kwargs: Any) -> Any:
        """Fit the conditionals in order, each to its own marginal likelihood.

        Called by ``botorch.fit.fit_gpytorch_mll`` (see
        ``GPARMarginalLogLikelihood``). Each conditional is fitted with
        ``fit_gpytorch_mll`` (L-BFGS-B), which retries from hyperparameters
        resampled from their priors when a Cholesky factorisation fails. With
        ``impute`` or ``denoise``, conditional m's inputs are rebuilt from the
        already fitted conditionals 1..m-1 before it is fitted.

        Keyword arguments (e.g. ``optimizer_kwargs``) go to every inner fit;
        SciPy L-BFGS-B's ``ftol`` defaults to ``FIT_FTOL``.
        """
        if "optimizer" not in kwargs:  # The tolerance is an option of the SciPy default.
            optimizer_kwargs = dict(kwargs.pop("optimizer_kwargs", None) or {})
            options = {"ftol": FIT_FTOL, **optimizer_kwargs.get("options", {})}
            kwargs["optimizer_kwargs"] = {**optimizer_kwargs, "options": options}
        for m, gp in enumerate(self.conditionals):
            if self._inputs_depend_on_fit(m):
                gp = self._build_conditional(m, reuse=gp)
                self.conditionals[m] = gp
            try:
                # Each evaluation builds small kernel matrices; wrapping them in
                # lazy kernel tensors costs about a tenth of the fit.
                with lazily_evaluate_kernels(False):
                    fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp), **kwargs)
            except Exception as error:
                raise RuntimeError(
                    f"Fitting the conditional of output {self.output_names[m]!r} "
                    f"failed: {error}"
                ) from error
            self._update_fed_values(m)
        self.eval()
        return mll

    def conditional_log_evidences(self, standardized: bool = False) -> Tensor:
        r"""``log p(y_m | y_{<m}, x)`` of every conditional's training data.

        In the units of the modelled outputs (after ``outcome_transform``, but
        undoing each conditional's standardisation), without hyperpriors, so
        they are comparable across output orderings.

        Args:
            standardized: Each conditional's evidence of its standardised
                targets instead (unit-free, for comparing different outputs;
                the same as the default under the paper's conventions, which
                do not standardise).

        Returns:
            An ``M`` tensor; its sum is GPAR's total log evidence.
        """
        values = []
        for gp in self.conditionals:
            gp.train()
            targets = gp.train_targets
            with torch.no_grad():
                marginal = gp.likelihood(gp(*gp.train_inputs))
                # For SGPR conditionals, the trace term of Titsias' bound.
                value = marginal.log_prob(targets) + sum(
                    term.loss() for term in gp.added_loss_terms()
                )
            _, std = output_scaling(gp)
            values.append(value if standardized else value - len(targets) * std.log())
            gp.eval()
        return torch.stack(values)

    def log_evidence(self) -> Tensor:
        """GPAR's total log evidence: the sum over conditionals."""
        return self.conditional_log_evidences().sum()

    # ------------------------------------------------------------- posterior
    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> Posterior:
        r"""The GPAR posterior at ``X``.

        Points of ``X`` that equal a training input (or a point added by
        ``condition_on_observations``) use that run's observed outputs: its
        earlier outputs enter later conditionals as observed, so a partially
        finished run is judged by the prefix it has shown. If several training
        rows share the input, the one with the longest observed prefix is used.

        Args:
            X: A ``batch_shape x q x d`` (or ``q x d``) tensor of inputs.
            output_indices: The outputs to return (default: all).
            observation_noise: If True, include each output's observation
                noise (noise of earlier outputs always propagates, as GPAR's
                conditionals are trained on noisy inputs).
            posterior_transform: Applied to the posterior. A
                ``ScalarizedPosteriorTransform`` (as Ax uses) is applied to the
                samples; others are called on the ``GPARPosterior``.

        Returns:
            A ``GPARPosterior`` over ``batch_shape x q x m`` outputs.
        """
        check_inputs(X, d=self.train_X.shape[-1], dtype=self.train_X.dtype)
        if torch.is_tensor(observation_noise):
            raise NotImplementedError(
                "GPARModel supports observation_noise=True/False, not given noise levels."
            )
        if kwargs:
            raise TypeError(f"Unexpected arguments: {sorted(kwargs)}.")
        indices = list(range(self.num_outputs)) if output_indices is None else list(output_indices)
        unknown = [i for i in indices if not 0 <= i < self.num_outputs]
        if unknown or not indices:
            raise ValueError(
                f"output_indices {indices} must be in [0, {self.num_outputs - 1}]."
            )
        self.eval()
        needed = max(indices) + 1
        cache = self._prediction_cache()
        prefix_values, prefix_mask = self._observed_prefix(X)
        sample_transform, num_reported = self._sample_transform(posterior_transform, indices)
        posterior = GPARPosterior(
            predictors=cache.predictors[:needed],
            windows=[self.window(m) for m in range(needed)],
            X=X,
            prefix_values=prefix_values,
            prefix_mask=prefix_mask,
            observation_noise=bool(observation_noise),
            denoise=self.denoise,
            output_indices=indices,
            sample_transform=sample_transform,
            num_reported=num_reported,
            shared_cache=cache.shared,
        )
        if posterior_transform is not None and not isinstance(
            posterior_transform, ScalarizedPosteriorTransform
        ):
            return posterior_transform(posterior)
        return posterior

    def _prediction_cache(self) -> _PredictionCache:
        """The conditionals' predictors, rebuilt only when the model changed.

        Acquisition optimisation calls ``posterior`` about a hundred times
        with the same model; each predictor costs a Cholesky factorisation.
        Like GPyTorch's prediction cache, but keyed on the hyperparameter
        values, the conditional modules and the fed values rather than on
        ``train()``, so edits in eval mode cannot leave it stale.
        """
        state = [t.detach() for t in chain(self.parameters(), self.buffers())] + [self.fed_Y]
        cache = self._cached_prediction
        if cache is None or not cache.matches(list(self.conditionals), state):
            predictors = [
                ConditionalPredictor(gp, self._conditional_inputs(m, self.observed[:, m]))
                for m, gp in enumerate(self.conditionals)
            ]
            cache = _PredictionCache(list(self.conditionals), state, predictors)
            self._cached_prediction = cache
        return cache

    def _sample_transform(
        self, posterior_transform: PosteriorTransform | None, indices: list[int]
    ) -> tuple[Any, int]:
        """Outcome untransform, then scalarisation, as one map on samples.

        The samples hold only the outputs ``indices``, in that order.
        """
        steps = []
        num_outputs = len(indices)
        if hasattr(self, "outcome_transform"):
            outcome_transform = self.outcome_transform
            if indices != list(range(self.num_outputs)):
                outcome_transform = outcome_transform.subset_output(indices)
            steps.append(lambda s: outcome_transform.untransform(s)[0])
        reported = num_outputs
        if isinstance(posterior_transform, ScalarizedPosteriorTransform):
            weights, offset = posterior_transform.weights, posterior_transform.offset
            if len(weights) != num_outputs:
                raise ValueError(
                    f"Scalarisation has {len(weights)} weights for {num_outputs} outputs."
                )
            steps.append(lambda s: (s @ weights.to(s) + offset).unsqueeze(-1))
            reported = 1
        if not steps:
            return None, reported

        def transform(samples: Tensor) -> Tensor:
            for step in steps:
                samples = step(samples)
            return samples

        return transform, reported

    def _observed_prefix(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Observed values (to feed forward) of the training rows equal to X.

        Returns:
            ``batch_shape x q x M`` values and a bool mask of observed outputs.
        """
        matches = (X.detach().unsqueeze(-2) == self.train_X).all(-1)  # b x q x n
        # Prefer the matching row with the most observed outputs.
        lengths = self.observed.sum(-1).to(X)
        score = torch.where(matches, lengths, -1.0)
        best = score.argmax(-1)
        mask = self.observed[best] & matches.any(-1, keepdim=True)
        values = torch.where(mask, self.fed_Y[best], 0.0)
        return values, mask

    # ------------------------------------------------------------- new data
    def condition_on_observations(self, X: Tensor, Y: Tensor, **kwargs: Any) -> GPARModel:
        r"""A GPAR model with more (possibly partial) runs, same hyperparameters.

        This is how a running or stopped trial's observed prefix enters the
        model without refitting: its row is added to every conditional whose
        output it observed, and ``posterior`` at its input then conditions on
        the observed values.

        Args:
            X: An ``n' x d`` tensor of inputs.
            Y: An ``n' x M`` tensor of outputs, NaN where not observed (closed
                downwards unless the model imputes).

        Returns:
            A new ``GPARModel``; this model is unchanged. Its conditionals
            normalise and standardise the combined data afresh.
        """
        if kwargs:
            raise TypeError(
                f"Unexpected arguments: {sorted(kwargs)}; GPAR conditions on outputs "
                "observed with its fitted noise."
            )
        if X.dim() != 2:
            raise ValueError(
                f"X must be `n x {self.train_X.shape[-1]}` (batched conditioning, as for "
                f"fantasies, is not supported); got {tuple(X.shape)}."
            )
        check_inputs(X, d=self.train_X.shape[-1], dtype=self.train_X.dtype)
        if Y.dim() != 2 or Y.shape[-1] != self.num_outputs:
            raise ValueError(f"Y must be `n x {self.num_outputs}`; got {tuple(Y.shape)}.")
        # A copy: the new model fits its outcome transform to the combined data.
        options = {**self._options, "outcome_transform": deepcopy(self._options["outcome_transform"])}
        model = GPARModel(
            torch.cat([self.train_X, X]), torch.cat([self.train_Y, Y.to(self.train_Y)]), **options
        )
        missing, unexpected = model.load_state_dict(self.hyperparameters(), strict=False)
        lost = [k for k in missing if not _derived_from_data(k)] + list(unexpected)
        if lost:
            raise ValueError(
                "The conditioned model's hyperparameters do not match this model's "
                f"(e.g. {lost[0]!r}): the combined data crosses SPARSE_ABOVE "
                f"({SPARSE_ABOVE} rows), which turns exact conditionals sparse. Build "
                "the model with num_inducing to keep it sparse throughout."
            )
        return model

    def hyperparameters(self) -> dict[str, Tensor]:
        """The state dict without what a model derives from its own data.

        For carrying fitted hyperparameters over to a model on other data
        (``load_state_dict(..., strict=False)``), which then normalises and
        standardises its own data and keeps its own constraint bounds (the
        paper conventions' noise floor scales with the targets' variance).
        """
        return {k: v for k, v in self.state_dict().items() if not _derived_from_data(k)}

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> Any:
        """Load hyperparameters, then recompute imputed/denoised inputs."""
        result = super().load_state_dict(state_dict, strict=strict)
        self.fed_Y = self.modelled_Y.clone()
        for m, gp in enumerate(self.conditionals):
            if self._inputs_depend_on_fit(m):
                self.conditionals[m] = self._build_conditional(m, reuse=gp)
            self._update_fed_values(m)
        return result

    def _inputs_depend_on_fit(self, m: int) -> bool:
        """Whether conditional m's (inducing) inputs come from earlier fits."""
        if m == 0:
            return False
        sparse = isinstance(self.conditionals[m].covar_module, InducingPointKernel)
        return self.impute or self.denoise or (sparse and not self.learn_inducing_points)


def _derived_from_data(key: str) -> bool:
    """Whether a state-dict entry is an input/outcome transform or a constraint bound."""
    return "_transform." in key or "_constraint." in key


def _paper_likelihood(targets: Tensor) -> GaussianLikelihood:
    """A prior-free Gaussian likelihood for targets in their own units.

    BoTorch's noise floor is meant for standardised targets and the reference
    starts the noise at 0.1 for data of about unit variance; here both scale
    with the targets' variance, so outputs such as small error rates work too.
    """
    variance = targets.var() if len(targets) > 1 else targets.new_ones(())
    variance = torch.where(variance > 0, variance, torch.ones_like(variance))
    return GaussianLikelihood(
        noise_constraint=GreaterThan(
            MIN_INFERRED_NOISE_LEVEL * variance.item(),
            transform=None,
            initial_value=0.1 * variance.item(),
        )
    )


class _PredictionCache:
    """Predictors of a model's conditionals and the key they were built for."""

    def __init__(
        self, conditionals: list[SingleTaskGP], state: list[Tensor], predictors: list[ConditionalPredictor]
    ) -> None:
        self.conditionals = conditionals  # the modules themselves, not copies
        self.state = [t.clone() for t in state]
        self.predictors = predictors
        self.shared = SharedBlockCache()

    def matches(self, conditionals: list[SingleTaskGP], state: list[Tensor]) -> bool:
        return (
            len(conditionals) == len(self.conditionals)
            and all(a is b for a, b in zip(conditionals, self.conditionals))
            and same_tensors(state, self.state)
        )


class GPARMarginalLogLikelihood(torch.nn.Module):
    """GPAR's total log evidence, and the handle BoTorch's fitting uses.

    ``fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))``
    fits every conditional to its own marginal likelihood (decoupled, as in
    the paper), through ``GPARModel.custom_fit``.
    """

    def __init__(self, likelihood: Likelihood | None, model: GPARModel) -> None:
        super().__init__()
        self.likelihood = likelihood
        self.model = model

    def forward(self) -> Tensor:
        return self.model.log_evidence()
