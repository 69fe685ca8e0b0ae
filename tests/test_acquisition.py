"""BoTorch's MC acquisition functions and optimisers on GPARModel, unchanged."""

from __future__ import annotations

import pytest
import torch
from botorch.acquisition import (
    qExpectedImprovement,
    qLogNoisyExpectedImprovement,
    qUpperConfidenceBound,
)
from botorch.acquisition.objective import GenericMCObjective
from botorch.optim import optimize_acqf, optimize_acqf_discrete
from botorch.sampling.normal import SobolQMCNormalSampler

from gpar_bo import GPARModel
from gpar_bo.synthetic import learning_curves

@pytest.fixture(scope="module")
def dtype() -> torch.dtype:
    # BoTorch's optimisers in float64 only: sampling and gradients in float32
    # are covered by test_posterior.py, and these are the slowest tests.
    return torch.float64


BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.double)
OPTIMUM = torch.tensor([0.3, 0.7], dtype=torch.double)
# Minimise the final checkpoint's error.
FINAL_ERROR = GenericMCObjective(lambda samples, X=None: -samples[..., -1])


def _acquisition(name: str, model: GPARModel):
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([32]), seed=0)
    if name == "qLogNEI":
        return qLogNoisyExpectedImprovement(
            model, X_baseline=model.train_X, objective=FINAL_ERROR, sampler=sampler
        )
    best = -model.train_Y[:, -1].nan_to_num(nan=float("inf")).min()
    if name == "qEI":
        return qExpectedImprovement(model, best_f=best, objective=FINAL_ERROR, sampler=sampler)
    return qUpperConfidenceBound(model, beta=0.5, objective=FINAL_ERROR, sampler=sampler)


@pytest.mark.parametrize("name", ["qLogNEI", "qEI", "qUCB"])
def test_optimize_acqf_finds_the_low_final_error_region(curve_model: GPARModel, name: str) -> None:
    acquisition = _acquisition(name, curve_model)
    candidate, value = optimize_acqf(
        acquisition, bounds=BOUNDS, q=1, num_restarts=4, raw_samples=64, options={"maxiter": 50}
    )
    assert candidate.shape == torch.Size([1, 2]) and torch.isfinite(value)
    final = learning_curves(candidate, [21])
    median_final = learning_curves(torch.rand(256, 2, dtype=torch.double), [21]).median()
    assert final.item() < median_final


def test_optimize_acqf_with_q_two(curve_model: GPARModel) -> None:
    acquisition = _acquisition("qEI", curve_model)
    candidates, _ = optimize_acqf(
        acquisition, bounds=BOUNDS, q=2, num_restarts=2, raw_samples=32, options={"maxiter": 30}
    )
    assert candidates.shape == torch.Size([2, 2])


def test_optimize_acqf_discrete_picks_the_best_choice(curve_model: GPARModel) -> None:
    choices = torch.cat([torch.rand(30, 2, dtype=torch.double), OPTIMUM.unsqueeze(0)])
    for name in ("qLogNEI", "qEI"):
        candidate, _ = optimize_acqf_discrete(
            _acquisition(name, curve_model), q=1, choices=choices, max_batch_size=16
        )
        finals = learning_curves(choices, [21]).squeeze(-1)
        rank = int((finals < learning_curves(candidate, [21]).squeeze()).sum())
        assert rank <= 5  # among the best choices
