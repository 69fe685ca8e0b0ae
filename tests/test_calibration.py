"""Calibration of the curve model's final-error predictive on curves with known noise.

Toy learning curves (``gpar_bo.synthetic.learning_curves``) times log-normal noise of
known standard deviation, so log errors have homoscedastic Gaussian noise: the only
misspecification left to the curve model is what it must estimate from few runs. A
model fitted on 80 runs (a third complete, the rest stopped early, as when the policy
decides) predicts the final log error of 200 other runs from random prefixes of 0..4
checkpoints (``FreezeThawIndex.final_paths``). Pooled over three such data sets and
fits (one alone varies by more than the tolerance), the central 95 % intervals must
cover the truth within three binomial standard errors; the same fit with every conditional's
noise forced to its floor, in its fit and in its hyperparameter draws (an over-confident
model with the same data and kernel hyperparameters), must cover fewer of the same runs,
by more than three standard errors of a paired sign test, so the check tells the two
apart. (Paired, because the floored model's coverage alone can stay inside the band: the
latent paths' spread, not the noise, makes most of the predictive's width, and where a
fit explains the last step mostly as noise, flooring it leaves the coverage above 0.92.) The curve model is the shipped one (it predicts over draws of
its later conditionals' hyperparameters); on the benchmark tables
(``benchmarks/results/calibration.md``) its coverage is reported per table; this pins the
well-specified case.
"""

from __future__ import annotations

import math

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models.utils.gpytorch_modules import MIN_INFERRED_NOISE_LEVEL

from gpar_bo.curve_model import curve_model_options, to_increments
from gpar_bo.freeze_thaw import FreezeThawIndex
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.synthetic import learning_curves

EPOCHS = [1, 3, 7, 14, 21]
NOISE_STD = 0.05  # of the log error
N_TRAIN, N_TEST, SEEDS = 80, 200, (1, 2, 3)

#: Three binomial standard errors of a calibrated 95 % coverage over the pooled runs.
TOLERANCE = 3 * math.sqrt(0.95 * 0.05 / (N_TEST * len(SEEDS)))


def curves(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Settings (``n x 2``), log-error increments with NaN after each run's prefix
    (``n x M``) and the final log errors (``n``); the first ``N_TRAIN`` runs train."""
    generator = torch.Generator().manual_seed(seed)
    n, M = N_TRAIN + N_TEST, len(EPOCHS)
    X = torch.rand(n, 2, generator=generator, dtype=torch.double)
    noise = NOISE_STD * torch.randn(n, M, generator=generator, dtype=torch.double)
    log_Y = learning_curves(X, EPOCHS).log() + noise
    complete = torch.rand(N_TRAIN, generator=generator) < 1 / 3
    complete[:2] = True
    lengths = torch.cat([
        torch.where(complete, M, torch.randint(1, M, (N_TRAIN,), generator=generator)),
        torch.randint(0, M, (N_TEST,), generator=generator),
    ])
    Z = to_increments(torch.where(torch.arange(M) < lengths.unsqueeze(-1), log_Y, float("nan")))
    return X, Z, log_Y[:, -1]


def covered(model: GPARModel, X_test: torch.Tensor, Z_test: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Whether each held-out run's central 95 % predictive interval covers ``truth``."""
    has = ~Z_test[:, 0].isnan()
    model = model.condition_on_observations(X_test[has], Z_test[has])
    index = FreezeThawIndex(model, torch.tensor(EPOCHS, dtype=torch.double), incumbent=1.0)
    with torch.no_grad():
        paths = index.final_paths(X_test, (~Z_test.isnan()).sum(-1))
    cdf = torch.distributions.Normal(0.0, 1.0).cdf((truth - paths.mean) / paths.variance.sqrt()).mean(0)
    return (cdf >= 0.025) & (cdf <= 0.975)


def floor_noise(model: GPARModel) -> None:
    """Every conditional's noise at its floor, in its fit and in each of its
    hyperparameter draws (conditioning copies both)."""
    floor = 1.01 * MIN_INFERRED_NOISE_LEVEL
    with torch.no_grad():
        for m, gp in enumerate(model.conditionals):
            gp.likelihood.noise = floor
            if m and model.num_hyperparameter_draws:
                names = [name for name, p in gp.named_parameters() if p.requires_grad]
                raw = model.hyperparameter_draws[m - 1].raw
                raw[:, names.index("likelihood.noise_covar.raw_noise")] = gp.likelihood.noise_covar.raw_noise.item()


@pytest.mark.long
def test_final_error_intervals_are_calibrated_and_a_noiseless_fit_is_not() -> None:
    fitted, floored = [], []
    for seed in SEEDS:
        X, Z, final = curves(seed)
        # The curve model on increments given by hand (the noise is added to log errors).
        model = GPARModel(X[:N_TRAIN], Z[:N_TRAIN], **curve_model_options(outcome_transform=None))
        torch.manual_seed(0)
        fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
        held_out = (X[N_TRAIN:], Z[N_TRAIN:], final[N_TRAIN:])
        fitted.append(covered(model, *held_out))
        floor_noise(model)
        floored.append(covered(model, *held_out))
    fitted, floored = torch.cat(fitted), torch.cat(floored)
    value = float(fitted.double().mean())
    assert abs(value - 0.95) <= TOLERANCE, value
    # Runs only the fit covers against runs only the floored model covers: equally
    # many, give or take sqrt(their sum), if flooring the noise changed nothing.
    lost, gained = int((fitted & ~floored).sum()), int((floored & ~fitted).sum())
    assert lost - gained > 3 * math.sqrt(lost + gained), (lost, gained)
