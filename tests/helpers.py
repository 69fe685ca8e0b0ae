"""Helpers shared by the tests: small data sets and a fit shortcut."""

from __future__ import annotations

import torch
from botorch.fit import fit_gpytorch_mll

from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.synthetic import learning_curves

EPOCHS = [1, 5, 11, 16, 21]


def fit(model: GPARModel) -> GPARModel:
    fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
    return model


def partial_curves(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Toy learning curves where later checkpoints are reached by fewer runs."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=generator, dtype=torch.double)
    Y = learning_curves(X, EPOCHS, noise_std=0.005, seed=seed)
    reached = torch.tensor([n, int(0.8 * n), int(0.6 * n), int(0.45 * n), int(0.3 * n)])
    for m, count in enumerate(reached.tolist()):
        Y[count:, m] = float("nan")
    return X, Y
