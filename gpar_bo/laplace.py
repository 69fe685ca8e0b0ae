r"""Draws of a fitted conditional's hyperparameters from their Laplace approximation.

A GPAR conditional fitted by maximising its marginal likelihood (plus log priors)
predicts with one value of its hyperparameters. Where a conditional is fitted on few
runs, or on runs selected because they looked good (as a freeze-thaw search selects
the runs it continues), that point estimate is too sure: its noise and length scales
are poorly determined, and predictions for other runs are over-confident
(``docs/calibration_diagnosis.md``). The Laplace approximation replaces the point by
``N(fit, H^{-1})``, ``H`` the Hessian of the negative log posterior at the fit, and
``GPARModel(..., hyperparameter_draws=K)`` predicts with the mixture over ``K`` draws.

Coordinates (``scales="raw"``, the default): BoTorch's noise and length scales are
constrained by a one-sided lower bound enforced by the fit's box constraints, not by a
transform (the raw value *is* the noise or length scale). Such a parameter is drawn in
``log(raw - bound)``, so that every draw is valid; one that sits on its bound (the fit
pushed it there) has no curvature there and is held at the fit, as are directions of
(numerically) zero curvature. Other raw parameters (a softplus outputscale, a constant
mean) are drawn as they are.

That fails for a switched-off component: an outputscale fitted to nearly 0 (a raw value
far below 0; a fit run to convergence goes on pushing it down) sits on a plateau of the
log posterior, which the Gaussian spreads over hundreds of raw units, up to outputscales
no fit would choose, and the mixture's predictive becomes far too wide
(``benchmarks/results/freeze_thaw_writeup.md``, "Switched-off components and the Laplace
draws"). ``scales="log"`` (a candidate) draws every parameter with a one-sided lower
bound in ``log(value - bound)``, softplus outputscales included, so that all scales are
drawn on one log scale whatever their raw form, and holds at the fit every direction
whose standard deviation would exceed ``MAX_DRAW_SD``. That threshold is a heuristic, not
a bound: the widest prior BoTorch's ``SingleTaskGP`` puts on a scale (its length-scale
LogNormal) has a standard deviation of ``sqrt(3)`` log units, so near a stationary point
away from the bounds a direction that wide is left open by the posterior rather than
located by it. A direction the prior does not hold may still be located by the data
within ``MAX_DRAW_SD`` or not: the Gamma noise prior (``noise_prior="gamma"``) and the
paper's conventions (no priors) leave such directions to the likelihood, and near a bound,
or away from a stationary point, the curvature in log units differs from the prior's.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from botorch.models import SingleTaskGP
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.settings import lazily_evaluate_kernels
from torch import Tensor
from torch.nn.utils import parameters_to_vector

__all__ = [
    "DRAW_SCALES", "DrawScales", "HyperparameterDraws", "LaplaceCoordinates", "laplace_draws",
    "set_trainable_raw", "trainable_raw",
]

#: Central-difference step of the Hessian, in the drawn coordinates.
HESSIAN_STEP = 1e-4
#: Eigenvalues of the Hessian below this fraction of the largest are flat directions.
FLAT_CURVATURE = 1e-8
#: With ``scales="log"``, eigendirections of the Hessian (of every drawn coordinate, log
#: scales and raw ones alike) whose standard deviation would exceed this (a factor
#: ``e**10`` in a scale) are taken as left open by the posterior: held at the fit. Chosen
#: from the priors' widths (module docstring), not fitted to any table's coverage.
MAX_DRAW_SD = 10.0
DrawScales = Literal["raw", "log"]
#: The coordinates ``laplace_draws`` can draw in (module docstring).
DRAW_SCALES: tuple[str, ...] = get_args(DrawScales)


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


class LaplaceCoordinates:
    r"""The coordinates ``phi`` in which a conditional's hyperparameters are drawn.

    Per element of ``trainable_raw(gp)``: ``log(value - bound)`` where the parameter has
    a one-sided lower bound enforced by the fit's box constraints (``value`` the raw
    value itself) or, with ``scales="log"``, by a transform (``value`` the constraint's
    transform of the raw value, e.g. softplus); the raw value elsewhere.

    Attributes:
        raw: The fit's raw values (``P``).
        bound: The lower bound of each value (``-inf`` where drawn as it is).
        drawn: False where a value sits on its bound (held at the fit).
        logged: True where drawn in ``log(value - bound)`` (a finite bound, not held).
        phi: The fit in the drawn coordinates.
    """

    def __init__(self, gp: SingleTaskGP, scales: DrawScales = "raw") -> None:
        if scales not in DRAW_SCALES:
            raise ValueError(f"scales must be one of {DRAW_SCALES}; got {scales!r}.")
        raw, bound, self._segments, start = [], [], [], 0
        for _, p, constraint in gp.named_parameters_and_constraints():
            if not p.requires_grad:
                continue
            values = p.detach().reshape(-1)
            lower = torch.full_like(values, -math.inf)
            transform = None
            if constraint is not None and hasattr(constraint, "lower_bound"):
                bounded_above = not math.isinf(float(constraint.upper_bound.max()))
                if not constraint.enforced or (scales == "log" and not bounded_above):
                    lower = constraint.lower_bound.to(values).expand_as(values).clone()
                    transform = constraint if constraint.enforced else None
            self._segments.append((slice(start, start + len(values)), transform))
            start += len(values)
            raw.append(values)
            bound.append(lower)
        self.raw, self.bound = torch.cat(raw), torch.cat(bound)
        self.logged = torch.isfinite(self.bound)
        excess = self.values(self.raw) - self.bound
        self.drawn = ~(self.logged & (excess <= 1e-9 * self.bound.abs().clamp_min(1.0)))
        self.logged &= self.drawn
        self.phi = self.to_phi(self.raw)

    def values(self, raw: Tensor) -> Tensor:
        """The parameters' values (constraints' transforms applied) of raw vectors ``... x P``."""
        parts = [raw[..., sl] if t is None else t.transform(raw[..., sl]) for sl, t in self._segments]
        return torch.cat(parts, -1)

    def to_phi(self, raw: Tensor) -> Tensor:
        """The drawn coordinates of raw vectors ``... x P``."""
        return torch.where(self.logged, (self.values(raw) - self.bound).clamp_min(1e-300).log(), raw)

    def to_raw(self, phi: Tensor) -> Tensor:
        """The raw vectors (``... x P``) of drawn coordinates ``phi``; differentiable."""
        # Finite and within the bound in every branch (a held element's filler is
        # bound + 1), so that the unused branch's gradient is 0, not NaN.
        safe = torch.where(self.logged, phi, 0.0)
        value = torch.where(torch.isfinite(self.bound), self.bound, 0.0) + safe.exp()
        parts = [
            torch.where(self.logged[sl], value[..., sl] if t is None else t.inverse_transform(value[..., sl]),
                        phi[..., sl])
            for sl, t in self._segments
        ]
        return torch.cat(parts, -1)


def laplace_draws(
    gp: SingleTaskGP, num_draws: int, generator: torch.Generator, scales: DrawScales = "raw"
) -> Tensor:
    r"""Draws of a fitted conditional's hyperparameters, ``N(fit, H^{-1})`` in the
    coordinates of ``LaplaceCoordinates(gp, scales)``.

    ``H`` is the Hessian of the negative log marginal likelihood plus log priors and
    added loss terms (GPyTorch's ``ExactMarginalLogLikelihood`` times the number of
    targets), by central differences of its exact gradient. The Jacobian of the change
    of coordinates is left out: the fit maximised the posterior in the raw values.
    ``gp`` is left as it was.

    Args:
        gp: A fitted conditional.
        num_draws: The number of draws ``K``.
        generator: The source of the standard normals (a CPU generator; the draws
            are moved to the parameters' device).
        scales: "raw" or "log": the coordinates, and whether directions wider than
            ``MAX_DRAW_SD`` are held (see the module docstring).

    Returns:
        ``K x P`` vectors of ``trainable_raw`` form, each within its constraints.
    """
    params = [p for p in gp.parameters() if p.requires_grad]
    coords = LaplaceCoordinates(gp, scales)
    raw, phi0 = coords.raw, coords.phi

    def gradient(phi: Tensor) -> Tensor:
        phi = phi.detach().requires_grad_(True)
        theta = coords.to_raw(phi)
        (dtheta,) = torch.autograd.grad(theta.sum(), phi)  # elementwise: d raw / d phi
        set_trainable_raw(gp, theta.detach())
        gp.zero_grad()
        mll = ExactMarginalLogLikelihood(gp.likelihood, gp)
        loss = -mll(gp(*gp.train_inputs), gp.train_targets) * len(gp.train_targets)
        loss.backward()
        grad = torch.cat([
            torch.zeros_like(p).reshape(-1) if p.grad is None else p.grad.reshape(-1)
            for p in params
        ])
        return grad * dtheta

    index = coords.drawn.nonzero().squeeze(-1)
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
        threshold = FLAT_CURVATURE * eigenvalues.max()
        if scales == "log":
            threshold = threshold.clamp_min(MAX_DRAW_SD**-2)
        curved = eigenvalues > threshold
        std = torch.where(curved, eigenvalues.clamp_min(1e-300).rsqrt(), 0.0)
        normals = torch.randn(num_draws, len(index), generator=generator, dtype=raw.dtype).to(raw)
        phi[:, index] = phi0[index] + (normals * std) @ vectors.mT
    with torch.no_grad():
        return coords.to_raw(phi)  # held elements are not logged: their fit, as it is


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
