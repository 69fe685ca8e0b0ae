r"""The GPAR variant for learning curves, used by every entry point of the package.

**D-GPAR-NL-X on log-error increments** (:func:`curve_model_options`): GPAR's output 1
is the log of the metric at the first checkpoint, output m > 1 the change of the log
since checkpoint m - 1 (:class:`LogIncrements`), with the "NL-X" kernels and denoised
inputs. The freeze-thaw policy (:class:`gpar_bo.freeze_thaw.FreezeThawPolicy`), Ax's
generation strategy (:func:`gpar_bo.ax.gpar_generation_strategy`) and early stopping
(:class:`gpar_bo.ax.GPAREarlyStoppingStrategy`) all default to it. Why this variant:

* D-GPAR-NL-X was the most accurate variant of the MLP validation-error study
  (``benchmarks/results/mlp_study_writeup.md``) and is the model of the benchmarked
  freeze-thaw policy (``benchmarks/results/freeze_thaw_writeup.md``).
* Log errors and their increments carry the same information (a triangular bijection
  of each prefix), but on increments each conditional's prior (a constant mean fitted
  on the runs that reached that checkpoint) says "the curve goes on changing as curves
  did" instead of "the curve ends where the finished runs ended": while few runs have
  finished, a run's predicted final value starts from its own last value.
* It predicts over ``HYPERPARAMETER_DRAWS`` (8) draws of the later conditionals'
  hyperparameters from their Laplace approximation (:mod:`gpar_bo.laplace`): with point
  estimates, its final-error intervals were over-confident on every table, most of all
  for the runs a search leaves paused (``benchmarks/results/calibration_diagnosis.md``).

The transform needs non-negative values (errors, losses); an exact zero, which an error
measured on a finite validation set can be, is read as half the smallest positive value
observed (:func:`floor_zeros`). For a metric that can be negative, give GPAR options
without it, e.g. ``curve_model_options(outcome_transform=None)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from typing import Any

import torch
from torch import Tensor

from gpar_bo.transformed import TriangularOutcomeTransform

#: Hyperparameter draws of the curve model (each with an eighth of a posterior's sample
#: paths; the freeze-thaw index's 128 paths give 16 per draw).
HYPERPARAMETER_DRAWS = 8

__all__ = ["LogIncrements", "curve_model_options", "floor_zeros", "from_increments",
           "resolve_gpar_options", "to_increments"]


def floor_zeros(values: Tensor) -> Tensor:
    """``values`` (NaN where unobserved, none negative) with exact zeros replaced by half
    the smallest positive value among them.

    An error measured on a finite validation set moves in steps no larger than the
    smallest positive error seen, so a zero says "below that step", not "log is minus
    infinity"; half the step keeps it below every positive value and finite in log
    units. Without zeros the values are returned unchanged. (A known measurement
    noise is evaluated at the value as reported: ``BinomialNoise`` gives a zero no
    variance, so with it a zero counts as exact.)

    Raises:
        ValueError: A value is negative, or every observed value is zero.
    """
    observed = values[~values.isnan()]
    if bool((observed < 0).any()):
        raise ValueError(
            f"Expected non-negative values (errors, losses); got {float(observed.min()):.4g}. "
            "For a metric that can be negative, use GPAR options without LogIncrements, e.g. "
            "gpar_options=curve_model_options(outcome_transform=None)."
        )
    if not bool((observed == 0).any()):
        return values
    positive = observed[observed > 0]
    if positive.numel() == 0:
        raise ValueError("Every observed value is 0: there is no positive value to scale a log by.")
    return torch.where(values == 0, positive.min() / 2, values)


def to_increments(values: Tensor) -> Tensor:
    """``... x M`` values (NaN after a prefix) to the first value and the changes
    between consecutive checkpoints (NaN after the same prefix)."""
    return torch.cat([values[..., :1], values.diff(dim=-1)], -1)


def from_increments(increments: Tensor) -> Tensor:
    """The inverse of :func:`to_increments`: cumulative sums along the last dimension."""
    return increments.cumsum(-1)


class LogIncrements(TriangularOutcomeTransform):
    r"""Non-negative outputs to log increments: ``z_1 = log y_1``, ``z_m = log y_m - log y_{m-1}``
    (exact zeros read as half the smallest positive value, :func:`floor_zeros`).

    ``forward`` maps ``batch x n x M`` outputs (NaN after each row's observed prefix)
    to increments; ``untransform`` maps increments back by cumulative sums and ``exp``.
    Output m of the original depends on increments 1..m only (lower-triangular), so
    ``GPARModel`` untransforms its posterior sample by sample (see
    :class:`gpar_bo.transformed.TriangularOutcomeTransform`). There is no fitted state.
    """

    def __init__(self) -> None:  # no arguments (what Ax's storage rebuilds it with)
        super().__init__()

    def forward(
        self, Y: Tensor, Yvar: Tensor | None = None, X: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``(increments of log Y, their variances)``; ``Y`` is ``batch x n x M``, NaN after prefixes.

        ``Yvar`` (the values' measurement variances, same shape) maps to the increments'
        by the delta method, ``Var(log y) = Var(y) / y^2``, with independent noise at
        each checkpoint, so an increment's variance is the sum of its two ends'.

        Raises:
            ValueError: An observed value is negative (or every one is 0), or a row's
                values are not a prefix of the outputs.
        """
        observed = ~Y.isnan()
        if (observed[..., 1:] & ~observed[..., :-1]).any():
            raise ValueError(
                "LogIncrements needs each row's values to be a prefix of the outputs (NaN "
                "only after it): an increment needs the previous checkpoint."
            )
        Y = floor_zeros(Y)
        if Yvar is None:
            return to_increments(Y.log()), None
        log_var = Yvar / Y.square()
        return to_increments(Y.log()), torch.cat([log_var[..., :1], log_var[..., 1:] + log_var[..., :-1]], -1)

    def untransform(
        self, Y: Tensor, Yvar: Tensor | None = None, X: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``(exp(cumsum(Y)), None)`` along the last dimension; a prefix of the outputs
        untransforms to the same prefix."""
        if Yvar is not None:
            raise NotImplementedError("LogIncrements does not map given noise levels (Yvar).")
        return from_increments(Y).exp(), None


def curve_model_options(**overrides: Any) -> dict[str, Any]:
    """``GPARModel`` options of the learning-curve variant (see the module docstring).

    A new dict, with a new ``LogIncrements`` each call (a transform is a module of the
    model it is given to). Keyword arguments override or add options, e.g.
    ``curve_model_options(noise_prior="gamma")``, ``hyperparameter_draws=0`` (point
    estimates of the hyperparameters) or ``outcome_transform=None`` (for a
    metric that can be negative).
    """
    return {"kernel": "NL-X", "denoise": True, "outcome_transform": LogIncrements(),
            "hyperparameter_draws": HYPERPARAMETER_DRAWS, **overrides}


def resolve_gpar_options(gpar_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``GPARModel`` options an entry point's ``gpar_options`` stand for: None is
    :func:`curve_model_options`; given options replace it (they are not merged) and are
    copied, so each model gets its own transform."""
    return curve_model_options() if gpar_options is None else deepcopy(dict(gpar_options))
