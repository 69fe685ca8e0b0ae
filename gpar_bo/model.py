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

import math
import warnings
from collections.abc import Callable, Hashable, Sequence
from copy import deepcopy
from typing import Any, NamedTuple

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.outcome import OutcomeTransform
from botorch.posteriors import Posterior
from gpytorch.likelihoods import Likelihood
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.settings import lazily_evaluate_kernels
from torch import Tensor
from torch.nn import Module, ModuleList

from gpar_bo import conditionals as spec
from gpar_bo.chain import ChainOptions, TrainingChain
from gpar_bo.data import check_inputs, check_training_data, resolve_output_names
from gpar_bo.kernels import Conventions, KernelFamily, input_kernels
from gpar_bo.laplace import DRAW_SCALES, DrawScales, HyperparameterDraws, laplace_draws, trainable_raw
from gpar_bo.posterior import GPARPosterior
from gpar_bo.prediction import output_scaling
from gpar_bo.prepared import PredictorCache
from gpar_bo.transformed import TriangularOutcomeTransform, transformed, untransformed

#: L-BFGS-B's relative tolerance on the loss (BoTorch's mll is per data point) for
#: the conditionals' fits. At SciPy's default (2.2e-9) the later conditionals of
#: learning-curve data run for very many iterations, shrinking a redundant kernel's
#: scale or the noise towards zero for log-evidence gains that do not improve
#: predictions. It is a trade-off, not free: it can also stop a fit during a slow
#: stretch that later pays off (the exchange-rate benchmark,
#: ``benchmarks/results/exchange.md``, reports both tolerances). Pass
#: ``optimizer_kwargs={"options": {"ftol": ...}}`` to override, and compare
#: ``conditional_log_evidences()`` when in doubt. Where a fit stops on such a stretch moves
#: with rounding, so other machines give other fits (``benchmarks.fit_sensitivity``); fits
#: run to convergence move much less, but their hyperparameter draws were too wide on the
#: real development tables, so this stays the default (docs/model.md, "Cost and defaults").
FIT_FTOL = 1e-6

#: Conditionals with at most this many training rows are also fitted from
#: ``SHORT_INPUT_LENGTHSCALES`` and keep the fit with the highest objective. With
#: few points, L-BFGS-B started at BoTorch's length scales on x often stops in an
#: optimum that explains a rapidly varying output as noise (the paper's synthetic
#: y1); larger conditionals pin their length scales down and would pay the extra
#: fits in O(n^3).
MULTI_START_MAX_ROWS = 100
#: Further starting length scales (normalised units) of the kernels over x alone
#: for small conditionals: the paper's scripts start at 0.1.
SHORT_INPUT_LENGTHSCALES = (0.1,)


class GPARModel(Model):
    r"""Gaussian Process Autoregressive Regression over M ordered outputs.

    Args:
        train_X: An ``n x d`` tensor of training inputs.
        train_Y: An ``n x M`` tensor of training outputs, NaN where a row has
            not (yet) observed an output. Must be closed downwards (each row
            observes a prefix of the outputs) unless ``impute=True``.
        output_names: Optional names of the M outputs (e.g. checkpoint epochs).
        kernel: The kernel family of table 2 of the paper: "L", "NL", "L-NL"
            (default), "NL-X" or "L-NL-X" (see ``KernelFamily``).
        markov: If given, conditional m sees only the last ``markov`` earlier
            outputs; ``markov=0`` gives independent GPs (the IGP baseline).
        impute: Allow data that is not closed downwards: missing earlier
            outputs of a row are filled with the posterior mean of their
            conditional, as in the paper (training becomes approximate).
        denoise: D-GPAR: earlier outputs enter later conditionals as the
            earlier conditionals' posterior means (latent values), in training
            and in prediction, instead of the noisy observations.
        use_rbf_kernel: EQ kernel on x (default) or Matern-5/2.
        outcome_transform: An optional outcome transform applied to
            ``train_Y`` before modelling: elementwise (e.g. ``Log()`` for error
            rates) or a ``TriangularOutcomeTransform`` (e.g. ``LogIncrements``,
            of :mod:`gpar_bo.curve_model`); the posterior is untransformed by
            sampling (see ``posterior``). Each conditional also
            scales its own targets (standardised, or divided by their root mean
            square under the paper's conventions).
        num_inducing: Fit every conditional with the variational inducing-point
            method of Titsias (2009) (GPyTorch's ``InducingPointKernel``, the
            collapsed SGPR bound) with this many inducing points. By default a
            conditional with more than ``conditionals.SPARSE_ABOVE`` (1,000) training
            rows uses ``conditionals.DEFAULT_NUM_INDUCING`` (256), the others are exact. As in the
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
            and the authors' package with ``normalise_y=False``; fitted in
            units of each conditional's targets (``RootMeanSquareScale``), so
            the outputs' units do not matter. See ``Conventions``.
            The paper's conventions need float64 data; BoTorch's also run in float32.
        noise_prior: Under BoTorch's conventions, each conditional's noise prior
            on its standardised targets: "lognormal" (``SingleTaskGP``'s default,
            LogNormal(-4, 1): nearly noiseless targets) or "gamma" (BoTorch's
            Gamma(1.1, 0.05), nearly flat over [0, 1]), for outputs that may be
            largely noise (see ``conditionals.NOISE_PRIORS`` and ``docs/model.md``),
            or "previous": "lognormal" for outputs 1 and 2, then for each later
            output a LogNormal prior of the same spread whose mode is the previous
            conditional's fitted noise (``conditionals.center_noise_prior``). It
            assumes the curve model's layout (``LogIncrements``: output 1 a level,
            outputs 2..M increments), so that a prior is only moved between outputs
            of one kind.
            The paper's conventions have no noise prior.
        hyperparameter_draws: Predict with the mixture over this many draws of every
            later conditional's hyperparameters (outputs 2..M) from the Laplace
            approximation of their posterior, drawn when the conditional is fitted
            (see :mod:`gpar_bo.laplace`); 0 (default) predicts with the fitted values.
            The first conditional, fitted on every run, keeps its fit. The samples
            are split into ``K`` contiguous blocks of (nearly) equal size, block ``k``
            drawn with draw ``k``, so ask for a multiple of ``K`` samples.
        draw_scales: The coordinates of the draws (``gpar_bo.laplace.laplace_draws``'s
            ``scales``): "raw" (default) or "log", a candidate that draws softplus
            outputscales in log units too and holds directions the posterior leaves
            open, such as a switched-off component's outputscale.
        measurement_noise: The known sampling noise of the measured values, a
            callable from ``n x M`` values to their variances (e.g.
            ``gpar_bo.measurement.BinomialNoise(num_examples)`` for error rates on
            a validation set). Each conditional's noise is then at least the
            median of its targets' measurement variances (mapped through the
            outcome transform, which must map variances, as ``LogIncrements``
            does), so that measurement noise is not explained as signal. The
            floor applies when fitting: conditioning on more runs, or loading
            fitted hyperparameters, keeps the fitted noise. See
            :mod:`gpar_bo.measurement`.
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
        noise_prior: str = "lognormal",
        measurement_noise: Callable[[Tensor], Tensor] | None = None,
        hyperparameter_draws: int = 0,
        draw_scales: DrawScales = "raw",
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
            "noise_prior": noise_prior,
            "measurement_noise": measurement_noise,
            "hyperparameter_draws": hyperparameter_draws,
            "draw_scales": draw_scales,
        }
        observed = check_training_data(train_X, train_Y, impute=impute)
        if markov is not None and markov < 0:
            raise ValueError(f"markov must be None or >= 0; got {markov}.")
        draws = hyperparameter_draws
        if isinstance(draws, bool) or not isinstance(draws, int) or draws < 0:
            raise ValueError(f"hyperparameter_draws must be an integer >= 0; got {draws!r}.")
        if draw_scales not in DRAW_SCALES:
            raise ValueError(f"draw_scales must be one of {DRAW_SCALES}; got {draw_scales!r}.")
        if num_inducing is not None and num_inducing < 1:
            raise ValueError(f"num_inducing must be None or >= 1; got {num_inducing}.")
        self.output_names = resolve_output_names(output_names, train_Y.shape[-1])
        self.kernel_family = KernelFamily(kernel)
        self.conventions = Conventions(conventions)
        if self.conventions is Conventions.PAPER and train_X.dtype != torch.float64:
            raise ValueError(
                f'conventions="paper" needs float64 data (got {train_X.dtype}): zero-mean '
                "GPs on raw outputs with a noise floor of 1e-4 of their variance are too "
                "ill-conditioned for float32."
            )
        if noise_prior not in spec.NOISE_PRIORS:
            raise ValueError(
                f"noise_prior must be one of {sorted(spec.NOISE_PRIORS)}; got {noise_prior!r}."
            )
        if noise_prior != "lognormal" and self.conventions is Conventions.PAPER:
            raise ValueError('conventions="paper" fits without priors; noise_prior does not apply.')
        self.noise_prior = noise_prior
        self.markov = markov
        self.impute = impute
        self.denoise = denoise
        self.use_rbf_kernel = use_rbf_kernel
        self.num_inducing = num_inducing
        self.learn_inducing_points = learn_inducing_points
        self.train_X = train_X
        self.train_Y = train_Y
        self.observed = observed
        train_Yvar = None if measurement_noise is None else measured_variances(measurement_noise, train_Y)
        modelled_Yvar = train_Yvar
        if outcome_transform is not None:
            outcome_transform.train()
            if train_Yvar is None:
                modelled_Y, _ = outcome_transform(train_Y)
            else:
                modelled_Y, modelled_Yvar = transform_with_variances(outcome_transform, train_Y, train_Yvar)
            if not torch.isfinite(modelled_Y[observed]).all():
                raise ValueError(
                    "The outcome transform gives non-finite values for observed "
                    "outputs (e.g. Log of a non-positive error); GPAR needs a "
                    "transform that is finite on the data."
                )
            outcome_transform.eval()
            self.outcome_transform = outcome_transform
        else:
            modelled_Y = train_Y
        options = ChainOptions(
            family=self.kernel_family,
            conventions=self.conventions,
            use_rbf_kernel=use_rbf_kernel,
            markov=markov,
            impute=impute,
            denoise=denoise,
            num_inducing=num_inducing,
            learn_inducing_points=learn_inducing_points,
            noise_prior=noise_prior,
        )
        self._chain = TrainingChain(train_X, modelled_Y, observed, options, modelled_Yvar)
        self._predictor_cache = PredictorCache()
        self.conditionals = ModuleList()
        for m in range(self.num_outputs):
            self.conditionals.append(self._chain.new_conditional(m, self.conditionals))
            self._chain.feed(m, self.conditionals[m])
        # Each conditional's starting values, a further start for warm-started fits.
        self._initial_values = [_parameter_values(gp) for gp in self.conditionals]
        self.num_hyperparameter_draws = hyperparameter_draws
        self.draw_scales = draw_scales
        # Per later conditional (index m - 1), its draws (NaN until it is fitted).
        self.hyperparameter_draws = ModuleList(
            HyperparameterDraws(hyperparameter_draws, len(trainable_raw(gp)), train_X)
            for gp in list(self.conditionals)[1:]
        ) if hyperparameter_draws else ModuleList()

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
        return self._chain.window(m)

    @property
    def modelled_Y(self) -> Tensor:
        """``n x M`` outputs as modelled (after ``outcome_transform``)."""
        return self._chain.modelled_Y

    @property
    def fed_Y(self) -> Tensor:
        """``n x M`` values fed into later conditionals: observations, or posterior
        means where imputing or denoising."""
        return self._chain.fed_Y

    # ---------------------------------------------------------------- fitting
    def custom_fit(
        self,
        mll: Any = None,
        outputs: Sequence[int] | None = None,
        start_from_initial: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Fit the conditionals in order, each to its own marginal likelihood.

        Called by ``botorch.fit.fit_gpytorch_mll`` (see
        ``GPARMarginalLogLikelihood``). Each conditional is fitted with
        ``fit_gpytorch_mll`` (L-BFGS-B), which retries from hyperparameters
        resampled from their priors when a Cholesky factorisation fails. With
        ``impute`` or ``denoise``, conditional m's inputs are rebuilt from the
        already fitted conditionals 1..m-1 before it is fitted.

        Conditionals with at most ``MULTI_START_MAX_ROWS`` training rows are
        fitted from their current starting values and from each of
        ``SHORT_INPUT_LENGTHSCALES`` on x, and keep the fit with the highest
        objective (see ``_fit_conditional``). With ``start_from_initial``, those
        whose current values are not the model's values at construction (a warm
        start, e.g. ``load_state_dict`` of an earlier fit) are also fitted from the
        latter: a fit warm-started from an optimum of fewer rows can stay there
        when a fit from the initial values finds a far better one
        (``benchmarks.fit_staleness``, docs/freeze_thaw_writeup.md). A candidate
        (``FreezeThawPolicy(fit_kwargs={"start_from_initial": True})``), not the default.

        ``outputs`` (indices into the model's outputs) fits only those
        conditionals; the others keep their hyperparameters (later ones still get
        the values fed by refitted earlier ones). The conditionals' objectives are
        separate, so fitting the outputs one call at a time, in order, gives the
        same fit as one call for all, up to rounding (spreading a refit's cost). E.g.
        ``fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), outputs=[2])``.

        Keyword arguments (e.g. ``optimizer_kwargs``) go to every inner fit;
        SciPy L-BFGS-B's ``ftol`` defaults to ``FIT_FTOL``.
        """
        outputs = None if outputs is None else list(outputs)
        fitted = set(range(self.num_outputs)) if outputs is None else set(outputs)
        if not fitted <= set(range(self.num_outputs)):
            raise ValueError(
                f"outputs must be indices in 0..{self.num_outputs - 1}; got {outputs}."
            )
        if "optimizer" not in kwargs:  # The tolerance is an option of the SciPy default.
            optimizer_kwargs = dict(kwargs.pop("optimizer_kwargs", None) or {})
            options = {"ftol": FIT_FTOL, **optimizer_kwargs.get("options", {})}
            kwargs["optimizer_kwargs"] = {**optimizer_kwargs, "options": options}
        chain, conditionals = self._chain, self.conditionals
        for m in range(self.num_outputs):
            if chain.depends_on_fit(m, conditionals[m]):
                conditionals[m] = chain.rebuilt(m, conditionals[m], conditionals)
            gp = conditionals[m]
            if m not in fitted:
                chain.feed(m, gp)
                continue
            if self.noise_prior == "previous" and m >= spec.PREVIOUS_NOISE_FROM:
                spec.center_noise_prior(gp, conditionals[m - 1])
            try:
                # Each evaluation builds small kernel matrices, for which lazy
                # kernel tensors are overhead rather than savings.
                with lazily_evaluate_kernels(False):
                    initial = self._initial_values[m] if start_from_initial else None
                    _fit_conditional(gp, self.train_X.shape[-1], initial_values=initial, **kwargs)
            except Exception as error:
                raise RuntimeError(
                    f"Fitting the conditional of output {self.output_names[m]!r} "
                    f"failed: {error}"
                ) from error
            if m and self.num_hyperparameter_draws:
                self._draw_hyperparameters(m)
            chain.feed(m, gp)
        self.eval()
        return mll

    def _draw_hyperparameters(self, m: int) -> None:
        """Draw conditional ``m``'s hyperparameters around its fit (``hyperparameter_draws``).

        Seeded by ``m``, so a fit's draws are reproducible. A Hessian that cannot be
        computed leaves the conditional predicting with its fit, with a warning.
        """
        draws = self.hyperparameter_draws[m - 1]
        generator = torch.Generator().manual_seed(m)
        try:
            draws.raw = laplace_draws(
                self.conditionals[m], self.num_hyperparameter_draws, generator, self.draw_scales
            )
        except Exception as error:  # e.g. a non-finite Hessian at a degenerate fit
            warnings.warn(
                f"No hyperparameter draws for output {self.output_names[m]!r} ({error}); "
                "it predicts with its fitted hyperparameters.",
                RuntimeWarning,
                stacklevel=3,
            )
            draws.raw = torch.full_like(draws.raw, math.nan)

    def conditional_log_evidences(self, standardized: bool = False) -> Tensor:
        r"""``log p(y_m | y_{<m}, x)`` of every conditional's training data.

        In the units of the modelled outputs (after ``outcome_transform``, but
        undoing each conditional's scaling of its targets), without hyperpriors, so
        they are comparable across output orderings.

        Args:
            standardized: Each conditional's evidence of its targets in the
                units it is fitted in instead (standardised, or under the
                paper's conventions divided by their root mean square):
                unit-free, for comparing different outputs.

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

        With an outcome transform, samples are untransformed one by one. A
        ``TriangularOutcomeTransform`` (original output m depends on modelled
        outputs 1..m, e.g. ``LogIncrements``) is applied to samples of every
        output up to the last one asked for, with a run's observed modelled
        values in place of the samples of the outputs it observed: such a run's
        observed outputs are reported as observed, and its later outputs are
        conditioned on what it showed.

        Args:
            X: A ``batch_shape x q x d`` (or ``q x d``) tensor of inputs.
            output_indices: The outputs to return (default: all).
            observation_noise: If True, include each output's observation
                noise (noise of earlier outputs always propagates, as GPAR's
                conditionals are trained on noisy inputs).
            posterior_transform: Applied to the posterior. A
                ``ScalarizedPosteriorTransform`` (as Ax uses) is applied to the
                samples; others are called on the posterior.

        Returns:
            A ``GPARPosterior`` over ``batch_shape x q x m`` outputs; with an
            outcome transform or a scalarisation, a ``MappedGPARPosterior`` (a
            BoTorch ``TransformedPosterior``) of it.
        """
        if kwargs:
            raise TypeError(f"Unexpected arguments: {sorted(kwargs)}.")
        indices = self._output_indices(output_indices)
        transform = getattr(self, "outcome_transform", None)
        triangular = isinstance(transform, TriangularOutcomeTransform)
        sampled = list(range(max(indices, default=-1) + 1)) if triangular else indices
        posterior: Posterior = self.modelled_posterior(X, sampled, observation_noise)
        if triangular:
            observed = posterior.prepared.observed_prefix(X, self.modelled_Y)
            posterior = untransformed(posterior, transform, indices, self.num_outputs, observed)
        elif transform is not None:
            posterior = untransformed(posterior, transform, indices, self.num_outputs)
        if posterior_transform is not None:
            posterior = transformed(posterior, posterior_transform)
        return posterior

    def modelled_posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
    ) -> GPARPosterior:
        r"""The GPAR posterior of the modelled outputs (after ``outcome_transform``).

        What ``posterior`` untransforms: e.g. for estimates that use each
        conditional's Gaussian moments (``GPARPosterior.rsample_with_conditionals``).
        Arguments as for ``posterior``.
        """
        check_inputs(X, d=self.train_X.shape[-1], dtype=self.train_X.dtype)
        if torch.is_tensor(observation_noise):
            raise NotImplementedError(
                "GPARModel supports observation_noise=True/False, not given noise levels."
            )
        indices = self._output_indices(output_indices)
        self.eval()
        # Acquisition optimisation asks for many posteriors of the same model;
        # the cache rebuilds the predictors only when the model changed.
        prepared = self._predictor_cache.get(
            self.conditionals,
            [self.window(m) for m in range(self.num_outputs)],
            self.train_X,
            self.observed,
            self.fed_Y,
            self.denoise,
            [None] + [d.raw if d.drawn else None for d in self.hyperparameter_draws]
            if self.num_hyperparameter_draws else (),
        )
        return GPARPosterior(prepared, X, indices, bool(observation_noise))

    def _output_indices(self, output_indices: Sequence[int] | None) -> list[int]:
        """The outputs asked for (default: all), checked."""
        indices = list(range(self.num_outputs)) if output_indices is None else list(output_indices)
        unknown = [i for i in indices if not 0 <= i < self.num_outputs]
        if unknown or not indices:
            raise ValueError(
                f"output_indices {indices} must be in [0, {self.num_outputs - 1}]."
            )
        return indices

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
            normalise and standardise the combined data afresh
            (``load_state_dict(..., keep_transforms=False)``).
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
        outcome_transform = deepcopy(self._options["outcome_transform"])
        options = {**self._options, "outcome_transform": outcome_transform}
        model = GPARModel(
            torch.cat([self.train_X, X]), torch.cat([self.train_Y, Y.to(self.train_Y)]), **options
        )
        missing, unexpected = model.load_state_dict(
            self.state_dict(), strict=False, keep_transforms=False
        )
        if missing or unexpected:
            raise ValueError(
                "The conditioned model's hyperparameters do not match this model's "
                f"(e.g. {(missing + unexpected)[0]!r}): the combined data crosses "
                f"SPARSE_ABOVE ({spec.SPARSE_ABOVE} rows), which turns exact conditionals "
                "sparse. Build the model with num_inducing to keep it sparse throughout."
            )
        return model

    def load_state_dict(
        self, state_dict: dict[str, Any], strict: bool = True, keep_transforms: bool = True
    ) -> _Keys:
        r"""Load hyperparameters (BoTorch's signature), then recompute fed values.

        The state's *data-derived* entries are each conditional's input and
        outcome transforms (normalisation bounds, standardisation statistics),
        the model's ``outcome_transform`` and the constraint bounds (the paper
        conventions' noise floor scales with the targets' variance); the rest
        are hyperparameters.

        Args:
            state_dict: A ``state_dict()`` of a ``GPARModel`` with the same
                options (or part of one).
            strict: Whether the keys must match exactly (with
                ``keep_transforms=False``: the hyperparameters' keys).
            keep_transforms: As in BoTorch: keep the state's transforms. They are
                loaded with the hyperparameters, and this model's data is
                re-expressed under them (its outputs transformed and its targets
                standardised with the loaded statistics), so the model predicts as
                the state's model would with this model's data: for a state of a
                model on the same data, exactly as it does. If False, the
                data-derived entries are not loaded and this model keeps those of
                its own data: what carrying fitted hyperparameters over to a model
                on other data needs (e.g. ``condition_on_observations``).

        Afterwards the values fed forward where imputing or denoising, and fixed
        inducing inputs, are recomputed with the loaded hyperparameters.

        Returns:
            The missing and unexpected keys (with ``keep_transforms=False``,
            hyperparameters only: data-derived entries are never missing).
        """
        if keep_transforms:
            result = Module.load_state_dict(self, state_dict, strict=strict)
            if hasattr(self, "outcome_transform"):
                self._chain.modelled_Y = self.outcome_transform(self.train_Y)[0]
        else:
            hyperparameters = {k: v for k, v in state_dict.items() if not _derived_from_data(k)}
            Module.load_state_dict(self, hyperparameters, strict=False)
            expected = set(self.hyperparameters())
            result = _Keys(
                sorted(expected - set(hyperparameters)), sorted(set(hyperparameters) - expected)
            )
            if strict and (result.missing_keys or result.unexpected_keys):
                raise RuntimeError(
                    f"Error(s) in loading hyperparameters for {type(self).__name__}: "
                    f"missing keys {result.missing_keys}, unexpected keys "
                    f"{result.unexpected_keys}."
                )
        if self.noise_prior == "previous":
            # Its noise priors were moved (center_noise_prior), and GPyTorch updates a
            # prior's distribution from the loaded location only when the prior itself is
            # loaded. (Only these: BoTorch's default priors evaluate in float32 however
            # their saved locations are stored, and must keep doing so.)
            for gp in list(self.conditionals)[spec.PREVIOUS_NOISE_FROM:]:
                prior = gp.likelihood.noise_covar.noise_prior
                prior.load_state_dict(prior.state_dict())
        self._chain.refeed(self.conditionals, rebuild_all=keep_transforms)
        return result

    def hyperparameters(self) -> dict[str, Tensor]:
        """The state dict without its data-derived entries (see ``load_state_dict``):
        what ``load_state_dict(..., keep_transforms=False)`` loads."""
        return {k: v for k, v in self.state_dict().items() if not _derived_from_data(k)}


class _Keys(NamedTuple):
    """Missing and unexpected keys of ``load_state_dict``, as ``torch.nn.Module`` returns."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _fit_conditional(
    gp: SingleTaskGP, x_dims: int, initial_values: dict[str, Tensor] | None = None, **kwargs: Any
) -> None:
    """Fit one conditional, from several starting points if it is small.

    The starts are the conditional's current hyperparameters (BoTorch's
    defaults, values the user set, or an earlier fit's: a warm start), the
    same with every length scale over x alone set to each of
    ``SHORT_INPUT_LENGTHSCALES``, and, if the current values are not
    ``initial_values`` (raw parameter values by name, as ``_parameter_values``
    gives; the model's values at construction), those. The fit with the
    highest objective that L-BFGS-B maximised (the log evidence, plus the log
    hyperpriors under BoTorch's conventions) is kept; ties keep the earlier
    start. An extra start whose fit fails is skipped. Deterministic given the
    data (as far as the fit is).

    The initial values are a start because a warm start can be a trap (see
    ``GPARModel.custom_fit``'s ``start_from_initial``).
    """
    kernels = input_kernels(gp.covar_module, x_dims)
    small = len(gp.train_targets) <= MULTI_START_MAX_ROWS

    def is_current(value: float) -> bool:  # such a start would repeat the first fit
        return all(
            torch.allclose(k.lengthscale, torch.full_like(k.lengthscale, value)) for k in kernels
        )

    shorts = SHORT_INPUT_LENGTHSCALES if small else ()
    starts: list[float | dict[str, Tensor] | None] = [
        None, *(v for v in shorts if not is_current(v))
    ]
    if small and initial_values is not None and _differs(_parameter_values(gp), initial_values):
        starts.append(initial_values)
    if len(starts) == 1:
        fit_gpytorch_mll(ExactMarginalLogLikelihood(gp.likelihood, gp), **kwargs)
        return
    current = deepcopy(gp.state_dict())
    best: tuple[float, dict[str, Tensor]] | None = None
    for start in starts:
        gp.load_state_dict(current)
        if isinstance(start, dict):
            _set_parameter_values(gp, start)
        elif start is not None:
            for kernel in kernels:
                kernel.lengthscale = torch.full_like(kernel.lengthscale, start)
        mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
        try:
            fit_gpytorch_mll(mll, **kwargs)
        except ModelFittingError:
            if start is None:
                raise
            continue  # an extra start that fails is only a start fewer
        value = _objective(mll)
        if best is None or value > best[0]:
            best = value, deepcopy(gp.state_dict())
    gp.load_state_dict(best[1])


def _parameter_values(gp: Module) -> dict[str, Tensor]:
    """``gp``'s raw parameter values by name (no priors, transforms or constraints)."""
    return {name: p.detach().clone() for name, p in gp.named_parameters()}


def _differs(values: dict[str, Tensor], other: dict[str, Tensor]) -> bool:
    """Whether ``values`` differ from ``other`` where both have a parameter of one shape."""
    return any(
        name in other and other[name].shape == v.shape and not torch.equal(other[name], v)
        for name, v in values.items()
    )


def _set_parameter_values(gp: Module, values: dict[str, Tensor]) -> None:
    """Set ``gp``'s parameters to ``values`` where the names and shapes match (a
    conditional rebuilt in another form keeps its other parameters)."""
    with torch.no_grad():
        for name, p in gp.named_parameters():
            if name in values and values[name].shape == p.shape:
                p.copy_(values[name])


def _objective(mll: ExactMarginalLogLikelihood) -> float:
    """The fitted objective: the mll with its priors and added loss terms."""
    gp = mll.model
    gp.train()
    with torch.no_grad():
        value = mll(gp(*gp.train_inputs), gp.train_targets)
    gp.eval()
    return float(value)


def _derived_from_data(key: str) -> bool:
    """Whether a state-dict entry is an input/outcome transform or a constraint bound."""
    return "_transform." in key or "_constraint." in key


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


def measured_variances(measurement_noise: Callable[[Tensor], Tensor], train_Y: Tensor) -> Tensor:
    """``measurement_noise(train_Y)``, checked: ``n x M``, finite and >= 0 where observed."""
    variances = measurement_noise(train_Y)
    if not torch.is_tensor(variances) or variances.shape != train_Y.shape:
        raise ValueError(
            f"measurement_noise must return variances of the shape of train_Y "
            f"{tuple(train_Y.shape)}; got {getattr(variances, 'shape', type(variances).__name__)}."
        )
    observed = variances[~train_Y.isnan()]
    if not (torch.isfinite(observed) & (observed >= 0)).all():
        raise ValueError("measurement_noise returned negative or non-finite variances for observed values.")
    return variances.to(train_Y)


def transform_with_variances(
    outcome_transform: OutcomeTransform, train_Y: Tensor, train_Yvar: Tensor
) -> tuple[Tensor, Tensor]:
    """``outcome_transform(train_Y, train_Yvar)``; a transform that does not map the
    variances (raises ``NotImplementedError`` or returns None for them) is an error."""
    name = type(outcome_transform).__name__
    try:
        modelled_Y, modelled_Yvar = outcome_transform(train_Y, train_Yvar)
    except NotImplementedError:
        modelled_Yvar = None
    if modelled_Yvar is None:
        raise ValueError(f"measurement_noise needs an outcome transform that maps variances; {name} does not.")
    return modelled_Y, modelled_Yvar
