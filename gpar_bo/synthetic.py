"""Synthetic problems: the paper's three-output function and toy learning curves."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def three_output_function(x: Tensor) -> Tensor:
    r"""The paper's synthetic problem (section 4), without noise.

    ``y1 = -sin(10 pi (x + 1)) / (2x + 1) - x^4``,
    ``y2 = cos^2(y1) + sin(3x)``, ``y3 = y2 y1^2 + 3x``.

    Args:
        x: An ``n x 1`` tensor of inputs in [0, 1].

    Returns:
        An ``n x 3`` tensor of the three outputs.
    """
    y1 = -torch.sin(10 * math.pi * (x + 1)) / (2 * x + 1) - x**4
    y2 = torch.cos(y1) ** 2 + torch.sin(3 * x)
    y3 = y2 * y1**2 + 3 * x
    return torch.cat([y1, y2, y3], dim=-1)


def learning_curves(
    X: Tensor, epochs: Sequence[int], noise_std: float = 0.0, seed: int | None = None
) -> Tensor:
    r"""Toy validation-error curves over the unit square, with crossings.

    The final error is lowest near ``x = (0.3, 0.7)``; far from it curves
    start low but plateau high (a fast learner that overfits), so early
    checkpoints rank configurations differently from the final one.

    Args:
        X: An ``n x 2`` tensor in the unit square.
        epochs: The checkpoints to report (positive integers).
        noise_std: Standard deviation of Gaussian noise on each value.
        seed: Seed for the noise.

    Returns:
        An ``n x len(epochs)`` tensor of errors in (0, 1).
    """
    t = torch.as_tensor(list(epochs), dtype=X.dtype).unsqueeze(0)
    distance = ((X - torch.tensor([0.3, 0.7], dtype=X.dtype)) ** 2).sum(-1, keepdim=True)
    plateau = 0.05 + 0.5 * distance
    speed = 0.1 + 0.8 * X[:, :1]  # faster learners reach their plateau sooner
    start = 0.9 - 0.3 * X[:, 1:]
    curves = plateau + (start - plateau) * torch.exp(-speed * (t - 1))
    if noise_std > 0:
        generator = torch.Generator().manual_seed(0 if seed is None else seed)
        noise = torch.randn(curves.shape, generator=generator, dtype=X.dtype)
        curves = curves + noise_std * noise
    return curves
