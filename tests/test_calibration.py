"""Calibration of the curve model's final-error predictive on curves with known noise.

Toy learning curves (``gpar_bo.synthetic.learning_curves``) times log-normal noise of
known standard deviation, so log errors have homoscedastic Gaussian noise: the only
misspecification left to the curve model is what it must estimate from few runs. A
model fitted on 80 runs (a third complete, the rest stopped early, as when the policy
decides) predicts the final log error of 200 other runs from random prefixes of 0..4
checkpoints; the central 95 % intervals of its predictive
(``FreezeThawIndex.final_paths``), pooled over three such data sets, must cover the
truth within a binomial tolerance (three standard errors). The model before the fix
(BoTorch's LogNormal(-4, 1) noise prior) passes this check too, so it pins
calibration on well-specified curves, not the noise prior's effect, which
``benchmarks/results/calibration.md`` measures on the tables.
"""

from __future__ import annotations

import math

import torch
from botorch.fit import fit_gpytorch_mll

from gpar_bo.freeze_thaw import CURVE_MODEL_OPTIONS, FreezeThawIndex, to_increments
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.synthetic import learning_curves

EPOCHS = [1, 3, 7, 14, 21]
NOISE_STD = 0.05  # of the log error
N_TRAIN, N_TEST, SEEDS = 80, 200, (1, 2, 3)


def covered(options: dict, seed: int) -> torch.Tensor:
    """Whether each held-out run's central 95 % interval of its final log error covers it."""
    generator = torch.Generator().manual_seed(seed)
    n, M = N_TRAIN + N_TEST, len(EPOCHS)
    X = torch.rand(n, 2, generator=generator, dtype=torch.double)
    noise = NOISE_STD * torch.randn(n, M, generator=generator, dtype=torch.double)
    Y = learning_curves(X, EPOCHS) * noise.exp()
    complete = torch.rand(N_TRAIN, generator=generator) < 1 / 3
    complete[:2] = True
    lengths = torch.cat([
        torch.where(complete, M, torch.randint(1, M, (N_TRAIN,), generator=generator)),
        torch.randint(0, M, (N_TEST,), generator=generator),
    ])
    Z = to_increments(torch.where(torch.arange(M) < lengths.unsqueeze(-1), Y, float("nan")).log())
    model = GPARModel(X[:N_TRAIN], Z[:N_TRAIN], **options)
    torch.manual_seed(0)
    fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
    has = ~Z[N_TRAIN:, 0].isnan()
    X_test = X[N_TRAIN:]
    model = model.condition_on_observations(X_test[has], Z[N_TRAIN:][has])
    index = FreezeThawIndex(model, torch.tensor(EPOCHS, dtype=torch.double), incumbent=1.0)
    with torch.no_grad():
        paths = index.final_paths(X_test, lengths[N_TRAIN:])
    z = (Y[N_TRAIN:, -1].log() - paths.mean) / paths.variance.sqrt()
    cdf = torch.distributions.Normal(0.0, 1.0).cdf(z).mean(0)
    return (cdf >= 0.025) & (cdf <= 0.975)


def coverage(options: dict) -> float:
    """Coverage pooled over the held-out runs of three independent data sets and fits."""
    return float(torch.cat([covered(options, seed) for seed in SEEDS]).double().mean())


#: Three binomial standard errors of a calibrated 95 % coverage over the pooled runs.
TOLERANCE = 3 * math.sqrt(0.95 * 0.05 / (N_TEST * len(SEEDS)))


def test_curve_model_final_error_intervals_are_calibrated() -> None:
    value = coverage(dict(CURVE_MODEL_OPTIONS))
    assert abs(value - 0.95) <= TOLERANCE, value

