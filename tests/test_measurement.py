"""Known measurement noise: the noise objects and GPAR's noise floor from them."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.models.transforms.outcome import Power

from gpar_bo import GPARModel
from gpar_bo.curve_model import LogIncrements, curve_model_options
from gpar_bo.measurement import BinomialNoise, GaussianNoise
from tests.helpers import fit, partial_curves


def test_binomial_and_gaussian_variances_by_hand() -> None:
    Y = torch.tensor([[0.1, 0.5, math.nan]], dtype=torch.double)
    torch.testing.assert_close(
        BinomialNoise(100)(Y), torch.tensor([[0.0009, 0.0025, math.nan]], dtype=torch.double), equal_nan=True
    )
    torch.testing.assert_close(
        GaussianNoise(0.01)(Y), torch.tensor([[1e-4, 1e-4, math.nan]], dtype=torch.double), equal_nan=True
    )


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: BinomialNoise(0), "num_examples"),
        (lambda: BinomialNoise(2.5), "num_examples"),
        (lambda: GaussianNoise(0.0), "std"),
        (lambda: GaussianNoise(math.inf), "std"),
        (lambda: BinomialNoise(10)(torch.tensor([[0.5, 1.5]])), "error rates"),
    ],
)
def test_bad_noise_is_a_one_line_error(make, match) -> None:
    with pytest.raises(ValueError, match=match) as error:
        make()
    assert "\n" not in str(error.value)


def floors(model: GPARModel) -> list[float]:
    return [float(gp.likelihood.noise_covar.raw_noise_constraint.lower_bound) for gp in model.conditionals]


def test_each_conditional_noise_floor_is_its_targets_median_measurement_variance() -> None:
    X, Y = partial_curves(n=30)
    noise = BinomialNoise(500)
    model = GPARModel(X, Y, **curve_model_options(measurement_noise=noise))
    # By hand: log-increment variances (delta method), standardised by each target's std.
    log_var = noise(Y) / Y**2
    increment_var = torch.cat([log_var[:, :1], log_var[:, 1:] + log_var[:, :-1]], -1)
    for m, floor in enumerate(floors(model)):
        observed = ~Y[:, m].isnan()
        targets = model.modelled_Y[observed, m]
        expected = float((increment_var[observed, m] / targets.var()).median())
        assert floor == pytest.approx(expected, rel=1e-6)  # the bound is stored in float32
        assert float(model.conditionals[m].likelihood.noise) >= floor


def test_fitted_noise_stays_at_or_above_the_floor_and_would_be_below_it_without() -> None:
    X, Y = partial_curves(n=30)  # toy curves with little noise: a free fit goes below
    noise = BinomialNoise(200)
    free = fit(GPARModel(X, Y, **curve_model_options()), maxiter=50)
    floored = fit(GPARModel(X, Y, **curve_model_options(measurement_noise=noise)), maxiter=50)
    fitted = [float(gp.likelihood.noise) for gp in floored.conditionals]
    assert all(f >= b * (1 - 1e-6) for f, b in zip(fitted, floors(floored)))
    free_noise = [float(gp.likelihood.noise) for gp in free.conditionals]
    assert any(f < b for f, b in zip(free_noise, floors(floored))), (free_noise, floors(floored))
    # Conditioning on more runs keeps the fitted noise (the floor is for the next fit).
    conditioned = floored.condition_on_observations(X[:2] * 0.5 + 0.25, Y[:2])
    assert [float(gp.likelihood.noise) for gp in conditioned.conditionals] == pytest.approx(fitted)


def test_bad_measurement_noise_is_a_one_line_error_before_fitting() -> None:
    X, Y = partial_curves(n=12)
    cases = [
        (lambda Y: Y[:, :2], "shape of train_Y"),
        (lambda Y: -Y, "negative or non-finite"),
    ]
    for measurement_noise, match in cases:
        with pytest.raises(ValueError, match=match) as error:
            GPARModel(X, Y, **curve_model_options(measurement_noise=measurement_noise))
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="maps variances; Power does not") as error:
        GPARModel(X, Y, outcome_transform=Power(0.5), measurement_noise=BinomialNoise(100))
    assert "\n" not in str(error.value)

    class DropsVariances(LogIncrements):
        def forward(self, Y, Yvar=None, X=None):
            return super().forward(Y)

    with pytest.raises(ValueError, match="maps variances; DropsVariances does not"):
        GPARModel(X, Y, outcome_transform=DropsVariances(), measurement_noise=BinomialNoise(100))
