r"""Draws of a fitted conditional's hyperparameters from their Laplace approximation.

A GPAR conditional fitted by maximising its marginal likelihood (plus log priors)
predicts with one value of its hyperparameters. Where a conditional is fitted on few
runs, or on runs selected because they looked good (as a freeze-thaw search selects
the runs it continues), that point estimate is too sure: its noise and length scales
are poorly determined, and predictions for other runs are over-confident
(``docs/calibration_diagnosis.md``). The Laplace approximation replaces the point by
``N(fit, H^{-1})``, ``H`` the Hessian of the negative log posterior at the fit, and
``GPARModel(..., hyperparameter_draws=K)`` predicts with the mixture over ``K`` draws.

Coordinates: BoTorch's noise and length scales are constrained by a lower bound
enforced by the fit's box constraints, not by a transform (the raw value *is* the
noise or length scale). Such a parameter is drawn in ``log(raw - bound)``, so that
every draw is valid; one that sits on its bound (the fit pushed it there) has no
curvature there and is held at the fit, as are directions of (numerically) zero
curvature. Other raw parameters (a softplus outputscale, a constant mean) are drawn
as they are.
"""

from __future__ import annotations

import math

import torch
from botorch.models import SingleTaskGP
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.settings import lazily_evaluate_kernels
from torch import Tensor
from torch.nn.utils import parameters_to_vector

__all__ = ["HyperparameterDraws", "laplace_coordinates", "laplace_draws", "set_trainable_raw", "trainable_raw"]

#: Central-difference step of the Hessian, in the drawn coordinates.
HESSIAN_STEP = 1e-4
#: Eigenvalues of the Hessian below this fraction of the largest are flat directions.
FLAT_CURVATURE = 1e-8


def trainable_raw(gp: SingleTaskGP) -> Tensor:
    """The flat vector of ``gp``'s trainable raw parameters (``named_parameters`` order)."""
    return parameters_to_vector(p for p in gp.parameters() if p.requires_grad).detach()


def set_trainable_raw(gp: SingleTaskGP, theta: Tensor) -> None:
    """Load the flat vector ``theta`` (as ``trainable_raw`` gives) into ``gp``, copying
    (``torch.nn.utils.vector_to_parameters`` would make the parameters views of it)."""
    params = [p for p in gp.parameters() if p.requires_grad]
    if theta.shape != (sum(p.numel() for p in params),):
        raise ValueError(
            f"theta must have {sum(p.numel() for p in params)} elements; got {tuple(theta.shape)}."
        )
    with torch.no_grad():
        for p, value in zip(params, theta.split([p.numel() for p in params])):
            p.copy_(value.view_as(p))
    gp.prediction_strategy = None  # GPyTorch's caches of the old values


def laplace_coordinates(gp: SingleTaskGP) -> tuple[Tensor, Tensor, Tensor]:
    r"""Per element of ``trainable_raw(gp)``: the raw value, the lower bound drawn
    above (``-inf`` where the parameter is drawn as it is) and whether it is drawn
    (False on a bound).

    Returns:
        ``raw``, ``bound`` and ``drawn`` (bool), each of the length of ``trainable_raw(gp)``.
    """
    raw, bound = [], []
    for _, p, constraint in gp.named_parameters_and_constraints():
        if not p.requires_grad:
            continue
        values = p.detach().reshape(-1)
        lower = torch.full_like(values, -math.inf)
        if constraint is not None and not constraint.enforced and hasattr(constraint, "lower_bound"):
            lower = constraint.lower_bound.to(values).expand_as(values).clone()
        raw.append(values)
        bound.append(lower)
    raw, bound = torch.cat(raw), torch.cat(bound)
    at_bound = torch.isfinite(bound) & (raw - bound <= 1e-9 * bound.abs().clamp_min(1.0))
    return raw, bound, ~at_bound


def laplace_draws(gp: SingleTaskGP, num_draws: int, generator: torch.Generator) -> Tensor:
    r"""Draws of a fitted conditional's hyperparameters, ``N(fit, H^{-1})`` in the
    coordinates of ``laplace_coordinates``.

    ``H`` is the Hessian of the negative log marginal likelihood plus log priors and
    added loss terms (GPyTorch's ``ExactMarginalLogLikelihood`` times the number of
    targets), by central differences of its exact gradient. The Jacobian of the change
    to log coordinates is left out: the fit maximised the posterior in the raw values.
    ``gp`` is left as it was.

    Args:
        gp: A fitted conditional.
        num_draws: The number of draws ``K``.
        generator: The source of the standard normals (a CPU generator; the draws
            are moved to the parameters' device).

    Returns:
        ``K x P`` vectors of ``trainable_raw`` form, each within its constraints.
    """
    params = [p for p in gp.parameters() if p.requires_grad]
    raw, bound, drawn = laplace_coordinates(gp)
    logged = torch.isfinite(bound) & drawn
    phi0 = torch.where(logged, (raw - bound).clamp_min(1e-300).log(), raw)

    def to_raw(phi: Tensor) -> Tensor:
        return torch.where(logged, bound + phi.exp(), phi)

    def gradient(phi: Tensor) -> Tensor:
        set_trainable_raw(gp, to_raw(phi))
        gp.zero_grad()
        mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
        loss = -mll(gp(*gp.train_inputs), gp.train_targets) * len(gp.train_targets)
        loss.backward()
        grad = torch.cat([
            torch.zeros_like(p).reshape(-1) if p.grad is None else p.grad.reshape(-1)
            for p in params
        ])
        return torch.where(logged, grad * phi.exp(), grad)  # d raw / d phi = e^phi

    index = drawn.nonzero().squeeze(-1)
    was_training = gp.training
    gp.train()
    try:
        with lazily_evaluate_kernels(False):
            columns = []
            for i in index.tolist():
                step = torch.zeros_like(phi0)
                step[i] = HESSIAN_STEP
                difference = gradient(phi0 + step) - gradient(phi0 - step)
                columns.append(difference[index] / (2 * HESSIAN_STEP))
    finally:
        set_trainable_raw(gp, raw)
        gp.zero_grad()
        gp.train(was_training)
    phi = phi0.expand(num_draws, -1).clone()
    if len(index):
        hessian = torch.stack(columns, -1)
        eigenvalues, vectors = torch.linalg.eigh((hessian + hessian.mT) / 2)
        if not torch.isfinite(eigenvalues).all():
            raise ValueError("The Hessian of the conditional's log posterior is not finite.")
        curved = eigenvalues > FLAT_CURVATURE * eigenvalues.max()
        std = torch.where(curved, eigenvalues.clamp_min(1e-300).rsqrt(), 0.0)
        normals = torch.randn(num_draws, len(index), generator=generator, dtype=raw.dtype).to(raw)
        phi[:, index] = phi0[index] + (normals * std) @ vectors.mT
    return to_raw(phi)


class HyperparameterDraws(torch.nn.Module):
    """One conditional's hyperparameter draws, kept with the model's state.

    ``raw`` is ``K x P`` (``trainable_raw`` vectors), NaN until drawn: a
    ``GPARModel`` predicts with the fit where there are no draws. A buffer, so the
    draws are saved, loaded and carried to conditioned models with the
    hyperparameters they were drawn around.
    """

    raw: Tensor

    def __init__(self, num_draws: int, num_parameters: int, like: Tensor) -> None:
        """``like``: a tensor of the dtype and device of the draws (e.g. the training data)."""
        super().__init__()
        self.register_buffer("raw", torch.full((num_draws, num_parameters), math.nan).to(like))

    @property
    def drawn(self) -> bool:
        return len(self.raw) > 0 and bool(torch.isfinite(self.raw).all())
