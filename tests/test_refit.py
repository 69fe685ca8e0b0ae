"""RefitSchedule: refit exactly when the data grew enough, else reload the last fit."""

from __future__ import annotations

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms.input import Normalize
from gpytorch.mlls import ExactMarginalLogLikelihood

from gpar_bo import GPARModel
from gpar_bo.refit import RefitSchedule, hyperparameters
from tests.helpers import EPOCHS, fit, partial_curves


def data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(n, 2, generator=generator, dtype=torch.double)
    return X, (6 * X).sin().sum(-1, keepdim=True)


def gp(n: int, scale: float = 1.0) -> SingleTaskGP:
    X, Y = data(n)
    return SingleTaskGP(scale * X, Y, input_transform=Normalize(2))


def fit_gp(model: Model) -> None:
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))


def test_refits_exactly_when_the_data_grew_by_more_than_the_threshold() -> None:
    sizes: list[int] = []
    schedule = RefitSchedule(lambda model: sizes.append(model.train_targets.shape[-1]), 0.5)
    decisions = {n: schedule.fit_or_reload(gp(n), n) for n in (10, 12, 15, 16, 24, 25)}
    # 10 (first), then 15 <= 1.5 x 10 reloads and 16 refits; 24 <= 1.5 x 16, 25 refits.
    assert decisions == {10: True, 12: False, 15: False, 16: True, 24: False, 25: True}
    assert sizes == [10, 16, 25] and schedule.fitted_size == 25
    with pytest.raises(ValueError, match="refit_growth must be >= 0"):
        RefitSchedule(fit_gp, -0.1)


def test_reload_keeps_the_new_models_own_transforms() -> None:
    schedule = RefitSchedule(fit_gp)
    fitted = gp(20)
    schedule.fit_or_reload(fitted, 20)
    # Inputs on another scale: the new model's Normalize bounds must stay its own.
    new = gp(12, scale=3.0)
    own_bounds = new.input_transform.bounds.clone()
    schedule.reload(new)
    torch.testing.assert_close(new.input_transform.bounds, own_bounds)
    assert not torch.equal(own_bounds, fitted.input_transform.bounds)
    torch.testing.assert_close(hyperparameters(new), schedule.hyperparameters)
    assert not new.training


def test_reload_into_gpar_recomputes_denoised_inputs() -> None:
    X, Y = partial_curves(n=30)
    schedule = RefitSchedule(lambda model: fit(model, maxiter=20))  # fitted, not converged
    schedule.fit_or_reload(GPARModel(X, Y, output_names=EPOCHS, denoise=True), 30)
    reloaded = GPARModel(X[:24], Y[:24], output_names=EPOCHS, denoise=True)
    schedule.reload(reloaded)
    reference = GPARModel(X[:24], Y[:24], output_names=EPOCHS, denoise=True)
    reference.load_state_dict(schedule.hyperparameters, strict=False)
    torch.testing.assert_close(reloaded.fed_Y, reference.fed_Y, equal_nan=True)
    test_X = torch.rand(4, 1, 2, dtype=torch.double)
    torch.testing.assert_close(reloaded.posterior(test_X).mean, reference.posterior(test_X).mean)


def test_reload_is_a_clear_error_before_a_fit_or_into_another_kind_of_model() -> None:
    schedule = RefitSchedule(fit_gp)
    with pytest.raises(RuntimeError, match="No fitted hyperparameters"):
        schedule.reload(gp(10))
    schedule.fit_or_reload(gp(10), 10)
    X, Y = data(10)
    with pytest.raises(ValueError, match="do not fit the new model"):
        schedule.reload(SingleTaskGP(X, torch.cat([Y, Y], -1)))
