r"""What a measured learning-curve value's own sampling noise is, when it is known.

A validation error is an estimate: a classifier's error rate on ``n`` held-out
examples has sampling variance ``e (1 - e) / n``. GPAR fits each conditional's noise
by maximum a posteriori; with few runs at a late checkpoint, BoTorch's noise prior
(whose mode is 0.7 % of the standardised targets' variance) wins and late log-error
increments, which are mostly measurement noise, are explained as signal. The result
is an over-confident predictive of the final error (``benchmarks/results/
calibration_diagnosis.md``). Given one of these objects, ``GPARModel(...,
measurement_noise=...)`` keeps every conditional's noise at least as large as the
median measurement variance of its targets (see ``conditionals.noise_floor``).

A measurement noise is a callable from ``n x M`` values (NaN where not observed) to
their ``n x M`` sampling variances, in the values' units.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["BinomialNoise", "GaussianNoise"]


class BinomialNoise:
    r"""An error rate measured on ``num_examples`` held-out examples: variance ``e (1 - e) / n``.

    This is each checkpoint's noise only if every checkpoint is measured on fresh
    examples. On one fixed validation set most of it is shared by a run's checkpoints,
    and the floor it sets overstates their noise (docs/model.md gives the measurement).

    Args:
        num_examples: The size of the validation set the errors are measured on.
    """

    def __init__(self, num_examples: int) -> None:
        if not (isinstance(num_examples, int) and num_examples >= 1):
            raise ValueError(f"num_examples must be an integer >= 1; got {num_examples!r}.")
        self.num_examples = num_examples

    def __call__(self, Y: Tensor) -> Tensor:
        """``n x M`` variances of the ``n x M`` error rates ``Y`` (NaN stays NaN).

        Raises:
            ValueError: An observed value is outside [0, 1] (not an error rate).
        """
        observed = Y[~Y.isnan()]
        if observed.numel() and not ((observed >= 0) & (observed <= 1)).all():
            raise ValueError(
                f"BinomialNoise models error rates in [0, 1]; got values in "
                f"[{float(observed.min()):.4g}, {float(observed.max()):.4g}]."
            )
        return Y * (1 - Y) / self.num_examples

    def settings(self) -> dict[str, int]:
        """The constructor's arguments (what storage records)."""
        return {"num_examples": self.num_examples}

    def __repr__(self) -> str:
        return f"BinomialNoise(num_examples={self.num_examples})"


class GaussianNoise:
    r"""Additive noise of a known standard deviation ``std`` on every value.

    Args:
        std: The standard deviation, in the values' units.
    """

    def __init__(self, std: float) -> None:
        if not (math.isfinite(std) and std > 0):
            raise ValueError(f"std must be finite and > 0; got {std!r}.")
        self.std = float(std)

    def __call__(self, Y: Tensor) -> Tensor:
        """``n x M`` variances ``std^2`` (NaN where ``Y`` is NaN)."""
        return torch.where(Y.isnan(), Y, torch.full_like(Y, self.std**2))

    def settings(self) -> dict[str, float]:
        """The constructor's arguments (what storage records)."""
        return {"std": self.std}

    def __repr__(self) -> str:
        return f"GaussianNoise(std={self.std})"
