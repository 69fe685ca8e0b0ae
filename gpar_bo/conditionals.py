r"""GPAR's conditionals: what each one sees and the BoTorch GP that models it.

Conditional m is a single-output ``SingleTaskGP`` over ``x`` joined with the
earlier outputs in its window, trained on the rows that observed output m. Its
inputs are normalised with fixed bounds (the data range of each column) and its
targets scaled: standardised under BoTorch's conventions, divided by their root mean
square under the paper's (``RootMeanSquareScale``), so that no starting value, bound
or threshold depends on the outputs' units. Everything here is a function of
plain tensors; ``GPARModel`` strings the conditionals together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from copy import deepcopy

import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.models.transforms.outcome import Standardize
from botorch.models.utils.gpytorch_modules import (
    MIN_INFERRED_NOISE_LEVEL,
    get_gaussian_likelihood_with_gamma_prior,
    get_gaussian_likelihood_with_lognormal_prior,
)
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import InducingPointKernel
from gpytorch.likelihoods import GaussianLikelihood
from gpytorch.means import ZeroMean
from gpytorch.priors import LogNormalPrior
from torch import Tensor
from torch.quasirandom import SobolEngine

from gpar_bo.kernels import Conventions, KernelFamily, conditional_kernel
from gpar_bo.prediction import ConditionalPredictor, output_scaling

#: Conditionals with more training rows than this use inducing points by default.
SPARSE_ABOVE = 1000
#: Inducing points per conditional when they are switched on automatically.
DEFAULT_NUM_INDUCING = 256

#: BoTorch's Gaussian likelihoods by noise prior (on standardised targets), for
#: BoTorch's conventions: "lognormal" is ``SingleTaskGP``'s default, LogNormal(-4, 1),
#: which expects nearly noiseless targets (its mode is 0.7 % of the targets'
#: variance); "gamma" is BoTorch's
#: Gamma(1.1, 0.05) (its default before 0.12, still that of its SAAS models), nearly
#: flat over [0, 1], which lets the data say how much of a target is noise.
NOISE_PRIORS = {
    "lognormal": get_gaussian_likelihood_with_lognormal_prior,
    "gamma": get_gaussian_likelihood_with_gamma_prior,
    # Built as "lognormal"; centred by ``center_noise_prior`` before each later fit.
    "previous": get_gaussian_likelihood_with_lognormal_prior,
}
#: The log-scale of a noise prior centred on the previous conditional's noise
#: (``noise_prior="previous"``): that of BoTorch's LogNormal(-4, 1), moved, not narrowed.
PREVIOUS_NOISE_SCALE = 1.0
#: The first output (0-based) whose noise prior ``noise_prior="previous"`` moves: the
#: curve model's second increment, so that a prior only moves between increments.
PREVIOUS_NOISE_FROM = 2


def window(m: int, markov: int | None) -> list[int]:
    """The earlier outputs conditional ``m`` sees (the last ``markov`` of them, if given)."""
    start = 0 if markov is None else max(0, m - markov)
    return list(range(start, m))


def conditional_inputs(
    train_X: Tensor, fed_Y: Tensor, window: Sequence[int], rows: Tensor | slice = slice(None)
) -> Tensor:
    """``rows x (d + len(window))``: x joined with the values fed from ``window``."""
    return torch.cat([train_X[rows], fed_Y[rows][:, list(window)]], -1)


def fed_rows(observed: Tensor, m: int, impute: bool, denoise: bool) -> Tensor:
    """The rows whose value at output ``m`` is the conditional's posterior mean.

    Imputing fills rows that skipped output m but observe a later one; denoising
    (D-GPAR) replaces every observation that later conditionals see.

    Args:
        observed: An ``n x M`` bool tensor, True where an output is observed.

    Returns:
        An ``n`` bool tensor.
    """
    needed = observed[:, m:].any(-1) if impute else observed[:, m]
    return needed if denoise else needed & ~observed[:, m]


def num_inducing(requested: int | None, num_rows: int) -> int | None:
    """Inducing points for a conditional with ``num_rows`` rows (None: exact)."""
    if requested is not None:
        return requested
    return DEFAULT_NUM_INDUCING if num_rows > SPARSE_ABOVE else None


def input_bounds(columns: Sequence[Tensor]) -> Tensor:
    """Fixed normalisation bounds: the data range of each column block.

    Args:
        columns: ``n_i x k_i`` tensors (x, then each earlier output's observed
            values), whose columns are the conditional's inputs in order.

    Returns:
        A ``2 x sum(k_i)`` tensor of lower and upper bounds.
    """
    lower = torch.cat([c.min(0).values for c in columns])
    upper = torch.cat([c.max(0).values for c in columns])
    # A constant column would divide by zero.
    upper = torch.where(upper > lower, upper, lower + 1.0)
    return torch.stack([lower, upper])


def regular_inputs(train_X: Tensor, num: int) -> Tensor:
    """``num x d`` regularly spaced points in the data's box (the paper's inducing x).

    A grid for one input dimension, a scrambled Sobol sequence with a fixed seed
    otherwise.
    """
    lower, upper = train_X.min(0).values, train_X.max(0).values
    d = train_X.shape[-1]
    if d == 1:
        unit = torch.linspace(0, 1, num, dtype=lower.dtype).unsqueeze(-1)
    else:
        unit = SobolEngine(d, scramble=True, seed=0).draw(num).to(lower)
    return lower + (upper - lower) * unit


def inducing_inputs(
    x: Tensor,
    predictors: Sequence[ConditionalPredictor],
    windows: Sequence[Sequence[int]],
    window: Sequence[int],
) -> Tensor:
    """Untransformed inducing inputs of a conditional seeing ``window`` (the paper's recipe).

    Args:
        x: ``u x d`` inducing x (see ``regular_inputs``).
        predictors: The fitted earlier conditionals, in output order.
        windows: The earlier outputs each of them sees.
        window: The earlier outputs the conditional sees.

    Returns:
        ``u x (d + len(window))``: ``x`` joined with the earlier outputs' plug-in
        posterior means at ``x`` (each mean fed into the later conditionals).
    """
    means: list[Tensor] = []  # u x 1 per earlier output
    with torch.no_grad():
        for predictor, seen in zip(predictors, windows):
            Z = torch.cat([x, *(means[i] for i in seen)], -1)
            mean, _ = predictor(Z.unsqueeze(-2), joint=False)
            means.append(mean)
    return torch.cat([x, *(means[j] for j in window)], -1)


def conditional_gp(
    inputs: Tensor,
    targets: Tensor,
    bounds: Tensor,
    x_dims: int,
    family: KernelFamily,
    use_rbf_kernel: bool,
    conventions: Conventions,
    inducing_inputs: Tensor | None = None,
    learn_inducing_points: bool = False,
    noise_prior: str = "lognormal",
    target_variances: Tensor | None = None,
) -> SingleTaskGP:
    r"""The GP of one conditional, unfitted.

    Args:
        inputs: ``n x D`` untransformed inputs (x joined with the earlier outputs).
        targets: ``n x 1`` targets.
        bounds: ``2 x D`` normalisation bounds (see ``input_bounds``).
        x_dims: The number ``d`` of x columns (the first ones).
        family: The kernel family (``KernelFamily``).
        use_rbf_kernel: EQ kernel on x, or Matern-5/2.
        conventions: BoTorch's ``SingleTaskGP`` defaults or the paper's (see
            ``Conventions``).
        inducing_inputs: ``u x D`` untransformed inducing inputs for an SGPR
            conditional (GPyTorch's ``InducingPointKernel``), or None for an exact one.
        learn_inducing_points: Optimise the inducing inputs with the hyperparameters.
        noise_prior: Under BoTorch's conventions, the key of ``NOISE_PRIORS``
            (the paper's conventions have no prior).
        target_variances: ``n x 1`` known measurement variances of the targets, if
            any: the noise is then bounded below by ``noise_floor`` of them.

    Returns:
        A ``SingleTaskGP`` with a ``Normalize`` input transform with fixed bounds and
        an outcome transform: ``Standardize`` under BoTorch's conventions (see
        ``standardize``), ``RootMeanSquareScale`` under the paper's.
    """
    paper = conventions is Conventions.PAPER
    outcome_transform = RootMeanSquareScale(m=1) if paper else standardize(targets)
    input_transform = Normalize(d=inputs.shape[-1], bounds=bounds)
    covar_module = conditional_kernel(
        family,
        x_dims=x_dims,
        y_dims=inputs.shape[-1] - x_dims,
        use_rbf_kernel=use_rbf_kernel,
        conventions=conventions,
    )
    if paper:
        likelihood = paper_likelihood(outcome_transform(targets)[0])
        mean_module = ZeroMean()
    else:
        likelihood = NOISE_PRIORS[noise_prior]()
        mean_module = None  # SingleTaskGP's constant mean
    if target_variances is not None:
        set_noise_floor(likelihood, noise_floor(outcome_transform, targets, target_variances))
    if inducing_inputs is not None:
        covar_module = InducingPointKernel(
            covar_module, inducing_points=input_transform(inducing_inputs), likelihood=likelihood
        )
        covar_module.inducing_points.requires_grad_(learn_inducing_points)
    gp = SingleTaskGP(
        inputs,
        targets,
        likelihood=likelihood,
        covar_module=covar_module,
        mean_module=mean_module,
        outcome_transform=outcome_transform,
        input_transform=input_transform,
    )
    return gp.to(inputs)


def center_noise_prior(gp: SingleTaskGP, previous: SingleTaskGP) -> None:
    """Centre ``gp``'s noise prior on ``previous``'s fitted noise, and start the noise there.

    The metric is measured the same way at every checkpoint, so its noise changes
    slowly from one to the next, while a late conditional is fitted on the few runs
    that reached it: there BoTorch's LogNormal(-4, 1) prior (mode 0.7 % of the
    targets' variance) lets a noise of nearly zero win, and the final predictive is
    over-confident (``benchmarks/results/calibration_diagnosis.md``). The new prior is
    the LogNormal of scale ``PREVIOUS_NOISE_SCALE`` whose mode is ``v``, the previous
    conditional's noise variance in ``gp``'s target units: where the data cannot tell
    noise from signal, the fit keeps the previous noise (a prior centred by its median
    would shrink it by ``e`` at every step). The fit starts from ``v`` too, also when it
    is warm-started from an earlier fit: where the data cannot tell, the earlier fit's
    noise is the earlier prior's choice. The constraint's lower bound still holds (``v``
    is kept at least twice it).

    Raises:
        ValueError: ``gp``'s likelihood has no LogNormal noise prior to move.
    """
    noise_covar = gp.likelihood.noise_covar
    if not isinstance(getattr(noise_covar, "noise_prior", None), LogNormalPrior):
        raise ValueError("center_noise_prior moves a LogNormal noise prior; this conditional has none.")
    _, previous_std = output_scaling(previous)
    _, std = output_scaling(gp)
    lower = float(noise_covar.raw_noise_constraint.lower_bound)
    center = float(previous.likelihood.noise.detach().squeeze() * (previous_std / std) ** 2)
    center = max(center, 2 * lower)
    # A LogNormal(mu, s) has its mode at exp(mu - s^2).
    loc, scale = (torch.tensor(v, dtype=std.dtype, device=std.device)
                  for v in (math.log(center) + PREVIOUS_NOISE_SCALE**2, PREVIOUS_NOISE_SCALE))
    prior = LogNormalPrior(loc, scale)
    noise_covar.register_prior("noise_prior", prior, noise_covar._noise_param, noise_covar._noise_closure)
    gp.likelihood.noise = torch.tensor(center).to(std)


def noise_floor(outcome_transform: Standardize, targets: Tensor, target_variances: Tensor) -> float:
    """The median of the targets' measurement variances, in the units the GP is fitted in.

    The median, not the minimum: the floor is one homoscedastic noise level, and
    most targets are measured at least that noisily. For log-error increments the
    variances count the noise at both ends of an increment; that is the noise left to
    the conditional when the earlier values it sees are denoised (D-GPAR), while raw
    fed values carry the earlier end's noise, which the conditional may then partly
    predict (the floor can be up to twice the remaining noise).

    Args:
        outcome_transform: The conditional's target scaling (fitted here on a copy).
        targets: ``n x 1`` targets.
        target_variances: ``n x 1`` their measurement variances.
    """
    scaling = deepcopy(outcome_transform).train()
    _, scaled = scaling(targets, target_variances)
    return float(scaled.median())


def set_noise_floor(likelihood: GaussianLikelihood, floor: float) -> None:
    """Bound ``likelihood``'s noise below by ``floor`` (kept if it is already higher),
    starting it at least there."""
    noise_covar = likelihood.noise_covar
    current = noise_covar.raw_noise_constraint
    lower = max(float(current.lower_bound), floor)
    start = max(float(likelihood.noise.detach().max()), lower)
    noise_covar.register_constraint(
        "raw_noise",
        GreaterThan(
            lower,
            transform=current._transform,
            inv_transform=current._inv_transform,
            initial_value=start,
        ),
    )
    likelihood.noise = torch.tensor(start)


def with_training_data(
    gp: SingleTaskGP, inputs: Tensor, targets: Tensor, inducing_inputs: Tensor | None = None
) -> SingleTaskGP:
    """The same conditional (its modules, so its hyperparameters) on new data.

    Its input and outcome transforms are kept as they are (evaluation mode: they
    are not refitted to the new data), so only the data changes: e.g. imputed or
    denoised earlier outputs, or targets re-expressed under loaded statistics.

    Args:
        gp: A conditional built by ``conditional_gp``.
        inputs: ``n x D`` untransformed inputs.
        targets: ``n x 1`` targets.
        inducing_inputs: ``u x D`` untransformed inducing inputs replacing a fixed
            SGPR conditional's, if given.
    """
    if inducing_inputs is not None:
        gp.covar_module.inducing_points.data = gp.input_transform(inducing_inputs)
    outcome_transform = getattr(gp, "outcome_transform", None)
    if outcome_transform is not None:
        # SingleTaskGP would refit a transform it is given to the new targets.
        outcome_transform.eval()
        targets, _ = outcome_transform(targets)
    rebuilt = SingleTaskGP(
        inputs,
        targets,
        likelihood=gp.likelihood,
        covar_module=gp.covar_module,
        mean_module=gp.mean_module,
        outcome_transform=None,
        input_transform=gp.input_transform,
    )
    if outcome_transform is not None:
        rebuilt.outcome_transform = outcome_transform
    return rebuilt.to(inputs)


def standardize(targets: Tensor) -> Standardize:
    """``SingleTaskGP``'s outcome transform, without its absolute threshold.

    BoTorch leaves targets whose standard deviation is below 1e-8 unscaled,
    which silently breaks outputs on small scales (the standardised priors
    and noise floor then act in the outputs' own units); only constant
    targets are left unscaled here.
    """
    return Standardize(m=1, min_stdv=torch.finfo(targets.dtype).tiny)


class RootMeanSquareScale(Standardize):
    r"""Divides single-output targets by their root mean square, without centring.

    The paper's conventions fit zero-mean GPs on the outputs as given. A
    zero-mean GP on ``y / s`` with kernel ``k`` and noise ``v`` is the zero-mean
    GP on ``y`` with kernel ``s^2 k`` and noise ``s^2 v``, so this changes only
    the units the hyperparameters are fitted in: the model and its maximum
    likelihood are the same, but the starting values, bounds and jitter then
    act relative to the outputs' size, so the fit and the predictions do not
    depend on the outputs' units. Targets that are all zero are left unscaled.
    """

    def forward(
        self, Y: Tensor, Yvar: Tensor | None = None, X: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Scale ``batch_shape x n x 1`` targets; in train mode, set the scale first."""
        if self.training:
            self._validate_training_inputs(Y=Y, Yvar=Yvar)
            rms = Y.pow(2).nanmean(dim=-2, keepdim=True).sqrt()
            self.stdvs = torch.where(rms > 0, rms, torch.ones_like(rms))
            self.means = torch.zeros_like(rms)
            self._stdvs_sq = self.stdvs.pow(2)
            self._is_trained = torch.tensor(True)
        return Y / self.stdvs, None if Yvar is None else Yvar / self._stdvs_sq


def paper_likelihood(targets: Tensor) -> GaussianLikelihood:
    """A prior-free Gaussian likelihood for targets scaled by ``RootMeanSquareScale``.

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
