"""Helpers shared by the tests: small data sets, a fit shortcut, tolerances per dtype."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from filelock import FileLock
from botorch.fit import fit_gpytorch_mll

from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.synthetic import learning_curves

EPOCHS = [1, 5, 11, 16, 21]

#: Small fitting and acquisition budgets for the Ax and tuning tests, whose plumbing, not the
#: quality of GPAR's fits, is under test (``gpar_generation_strategy``'s and ``tune``'s).
FAST_GPAR = {
    "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 20}}},
    "acqf_optimizer_kwargs": {"num_restarts": 1, "raw_samples": 32, "options": {"maxiter": 15}},
}

#: The dtypes the core tests run in.
DTYPES = [torch.float64, torch.float32]
#: The loosest tolerances a float32 comparison gets (float64 ones keep their own).
FLOAT32_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}


def tolerance(
    dtype: torch.dtype, float32: dict[str, float] | None = None, **float64: float
) -> dict[str, float]:
    """``assert_close`` tolerances: ``float64`` as given (default: torch's); for
    float32 ``float32`` if given, else the given ones loosened to at least
    ``FLOAT32_TOLERANCE``."""
    if dtype == torch.float64:
        return float64
    if float32 is not None:
        return float32
    return {k: max(float64.get(k, 0.0), v) for k, v in FLOAT32_TOLERANCE.items()}


def computed_once(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, computed once per test run: pytest-xdist's workers share it through
    a file ``name`` of this run in their common temporary folder, under a lock
    (filelock: a dependency of the package). ``compute`` returns what ``torch.save``
    stores and ``torch.load`` loads by default (tensors, numbers, strings, lists, dicts)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # not run by pytest-xdist
        return compute()
    path = tmp_path_factory.getbasetemp().parent / f"{name}-{run}.pt"
    with FileLock(f"{path}.lock"):
        if not path.is_file():
            torch.save(compute(), path)
        return torch.load(path)


def fit(model: GPARModel, maxiter: int | None = None) -> GPARModel:
    """Fit ``model``; ``maxiter`` caps each conditional's L-BFGS iterations (for tests
    that need fitted, not converged, hyperparameters)."""
    kwargs = {} if maxiter is None else {"optimizer_kwargs": {"options": {"maxiter": maxiter}}}
    fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), **kwargs)
    return model


def partial_curves(
    n: int = 40, seed: int = 0, dtype: torch.dtype = torch.double
) -> tuple[torch.Tensor, torch.Tensor]:
    """Toy learning curves where later checkpoints are reached by fewer runs."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=generator, dtype=torch.double)
    Y = learning_curves(X, EPOCHS, noise_std=0.005, seed=seed)
    reached = torch.tensor([n, int(0.8 * n), int(0.6 * n), int(0.45 * n), int(0.3 * n)])
    for m, count in enumerate(reached.tolist()):
        Y[count:, m] = float("nan")
    return X.to(dtype), Y.to(dtype)


def without_bands(report: dict) -> dict:
    """A tuning report without GPAR's final-value bands, which a resumed run computes from
    a refit (equal up to the fit), so that two reports of the same runs compare equal."""
    trials = [{k: v for k, v in t.items() if k != "predicted_final"} for t in report["trials"]]
    return {**report, "trials": trials}
