"""The Gittins index of the freeze-thaw policy: closed forms and monotonicity."""

from __future__ import annotations

import math

import pytest
import torch

from gpar_bo import GPARModel
from gpar_bo.freeze_thaw import FreezeThawIndex, expected_improvement_lognormal, stopping_index
from tests.helpers import EPOCHS as CURVE_EPOCHS

EPOCHS = [1, 2, 4]


def test_index_with_one_checkpoint_left_is_expected_improvement_per_epoch() -> None:
    S, N = 64, 3
    reward = torch.rand(S, N, generator=torch.Generator().manual_seed(0), dtype=torch.double)
    paths = torch.randn(S, N, 3, dtype=torch.double)
    observed = torch.full((N,), 2)
    epochs = torch.tensor(EPOCHS, dtype=torch.double)
    index = stopping_index(reward, paths, observed, epochs, iterations=40)
    assert torch.allclose(index, reward.mean(0) / (4 - 2), rtol=1e-9)


def test_index_is_zero_when_no_path_improves() -> None:
    paths = torch.randn(16, 4, 3, dtype=torch.double)
    observed = torch.tensor([0, 1, 2, 0])
    epochs = torch.tensor(EPOCHS, dtype=torch.double)
    index = stopping_index(torch.zeros(16, 4, dtype=torch.double), paths, observed, epochs)
    assert torch.equal(index, torch.zeros(4, dtype=torch.double))


def test_index_grows_with_the_incumbent_and_values_the_option_to_stop() -> None:
    generator = torch.Generator().manual_seed(1)
    S, N = 128, 5
    level = torch.randn(S, N, 1, generator=generator, dtype=torch.double) - 2.0
    paths = level + 0.1 * torch.randn(S, N, 3, generator=generator, dtype=torch.double)
    epochs = torch.tensor(EPOCHS, dtype=torch.double)
    observed = torch.zeros(N, dtype=torch.long)
    std = torch.full_like(paths[..., -1], 0.05)
    indices = [
        stopping_index(expected_improvement_lognormal(paths[..., -2], std, inc), paths, observed, epochs)
        for inc in (0.05, 0.1, 0.2)
    ]
    assert (indices[0] <= indices[1]).all() and (indices[1] <= indices[2]).all()
    assert (indices[0] < indices[2]).all()
    # Stopping is an option: the index is at least the expected improvement per total epoch.
    reward = expected_improvement_lognormal(paths[..., -2], std, 0.1)
    assert (indices[1] >= reward.mean(0) / 4 * (1 - 1e-4)).all()


def test_lognormal_expected_improvement_matches_monte_carlo() -> None:
    mean, std = torch.tensor([-2.0, -2.5]), torch.tensor([0.3, 0.1])
    z = torch.randn(200_000, 2, generator=torch.Generator().manual_seed(0))
    monte_carlo = (0.1 - (mean + std * z).exp()).clamp_min(0).mean(0)
    exact = expected_improvement_lognormal(mean, std, 0.1)
    assert torch.allclose(exact, monte_carlo, atol=2e-4)


def test_lognormal_expected_improvement_is_zero_not_nan_on_a_diverged_path() -> None:
    # A hyperparameter draw can make GPAR's chain diverge: log errors of hundreds, whose
    # exp overflows. Such a path pays nothing; NaN would zero its run's index.
    mean = torch.tensor([893.0, 1369.0, 1e5], dtype=torch.double)
    std = torch.tensor([0.1, 2.0, 0.1], dtype=torch.double)
    assert torch.equal(expected_improvement_lognormal(mean, std, 0.1), torch.zeros(3, dtype=torch.double))
    # Well below the incumbent the put is worth its intrinsic value, incumbent - E[error].
    deep = expected_improvement_lognormal(torch.tensor([-3.0], dtype=torch.double),
                                          torch.tensor([0.1], dtype=torch.double), 0.1)
    torch.testing.assert_close(deep, torch.tensor([0.1 - math.exp(-3.0 + 0.005)], dtype=torch.double),
                               rtol=1e-9, atol=0.0)
    # A very wide path: exp(std^2 / 2) overflows, the second term does not; 0 < EI < incumbent * Phi(z).
    wide = expected_improvement_lognormal(torch.zeros(1, dtype=torch.double),
                                          torch.full((1,), 40.0, dtype=torch.double), 0.1)
    first = 0.1 * torch.special.ndtr(torch.tensor([math.log(0.1) / 40.0], dtype=torch.double))
    assert bool(torch.isfinite(wide).all()) and 0.0 < float(wide) < float(first)
    # Infinite limits pay what they pay in the limit; a NaN mean is not hidden.
    limits = expected_improvement_lognormal(torch.tensor([math.inf, 0.0, math.nan], dtype=torch.double),
                                            torch.tensor([0.1, math.inf, 0.1], dtype=torch.double), 0.1)
    assert limits[0] == 0.0 and abs(float(limits[1]) - 0.05) < 1e-12 and bool(limits[2].isnan())


def test_index_refuses_a_non_finite_reward() -> None:
    reward = torch.rand(16, 2, dtype=torch.double)
    reward[3, 1] = float("nan")
    with pytest.raises(ValueError, match="reward must be finite"):
        stopping_index(reward, torch.randn(16, 2, 3, dtype=torch.double), torch.tensor([0, 1]),
                       torch.tensor(EPOCHS, dtype=torch.double))


def test_latent_paths_add_the_final_noise_once(curve_model: GPARModel) -> None:
    dtype, M = curve_model.train_X.dtype, len(CURVE_EPOCHS)
    epochs = torch.tensor(CURVE_EPOCHS, dtype=dtype)
    observed = (~curve_model.train_Y.isnan()).sum(-1)
    one_left = torch.nonzero(observed == M - 1).squeeze(-1)[:2]
    X = torch.cat([torch.rand(3, 2, dtype=dtype), curve_model.train_X[one_left]])
    prefixes = torch.cat([torch.zeros(3, dtype=torch.long), observed[one_left]])
    noisy, latent = (FreezeThawIndex(curve_model, epochs, 0.1, 64, latent_paths=flag).final_paths(X, prefixes)
                     for flag in (False, True))
    # The same latent chain: the final's latent variance along each path is the same,
    # and the final's noise is in both variances once. In float32 these small posterior
    # variances are differences of terms of the prior's scale, and the two chains round
    # them differently: beyond torch's float32 default of 1e-5 on some machines.
    atol = 1e-4 if dtype == torch.float32 else None
    torch.testing.assert_close(latent.variance - latent.noise, noisy.variance - noisy.noise,
                               atol=atol, rtol=None if atol is None else 1e-3)
    assert bool((latent.noise > 0).all())
    # With one checkpoint left nothing is sampled before the final: the same predictive.
    torch.testing.assert_close(latent.mean[:, 3:], noisy.mean[:, 3:])
    torch.testing.assert_close(latent.log_errors[:, 3:, :-1], noisy.log_errors[:, 3:, :-1])
    # For new settings the noisy paths add one noise per increment; the latent ones none.
    assert bool((latent.log_errors[:, :3, 1:].var(0) < noisy.log_errors[:, :3, 1:].var(0)).all())
    assert bool((latent.mean[:, :3].var(0) < noisy.mean[:, :3].var(0)).all())


def test_lognormal_expected_improvement_takes_an_incumbent_per_path() -> None:
    mean, std = torch.tensor([[-2.0, -2.5], [-2.2, -1.0]]), torch.tensor([[0.3, 0.1], [0.2, 0.5]])
    incumbents = torch.tensor([[0.1], [0.05]])
    per_path = expected_improvement_lognormal(mean, std, incumbents)
    for i in range(2):
        torch.testing.assert_close(per_path[i], expected_improvement_lognormal(mean[i], std[i], float(incumbents[i])))
    with pytest.raises(ValueError, match="positive error"):
        expected_improvement_lognormal(mean, std, torch.tensor([[0.1], [0.0]]))


def test_pending_runs_lower_the_incumbent_path_by_path(curve_model: GPARModel) -> None:
    dtype, M = curve_model.train_X.dtype, len(CURVE_EPOCHS)
    epochs = torch.tensor(CURVE_EPOCHS, dtype=dtype)
    observed = (~curve_model.train_Y.isnan()).sum(-1)
    one_left = torch.nonzero(observed == M - 1).squeeze(-1)
    leader = one_left[:1]  # trained to its final checkpoint by another worker
    incumbent = 10.0  # far above the leader's predicted final: it lowers the incumbent on every path
    plain = FreezeThawIndex(curve_model, epochs, incumbent, 64, seed=3)
    assert plain.pending_incumbents() == incumbent  # no pending run: the float, as before
    fantasy = FreezeThawIndex(curve_model, epochs, incumbent, 64, seed=3, pending=curve_model.train_X[leader])
    incumbents = fantasy.pending_incumbents()
    assert incumbents.shape == (64, 1) and bool((incumbents < incumbent).all())
    # They are draws of the leader's observed final error: its predictive's moments.
    with torch.no_grad():
        paths = plain.final_paths(curve_model.train_X[leader], observed[leader])
    # Standardised by that predictive (with its observation noise), the draws have mean 0 and
    # variance 1 (within about 4 standard errors for 64 draws; drawn without the noise
    # their variance would be far below 1, without the normals 0).
    standard = (incumbents.log().squeeze(-1) - paths.mean.squeeze(-1)) / paths.variance.squeeze(-1).sqrt()
    assert abs(float(standard.mean())) < 4 / 8 and 0.3 < float(standard.var()) < 1.7
    # Runs are worth less against the incumbent the leader will leave; never more.
    X = torch.cat([torch.rand(4, 2, dtype=dtype), curve_model.train_X[one_left[1:3]]])
    prefixes = torch.cat([torch.zeros(4, dtype=torch.long), observed[one_left[1:3]]])
    before, after = plain.index(X, prefixes), fantasy.index(X, prefixes)
    assert bool((after <= before).all()) and bool((after < before).any())
    # Reproducible from the seed; another seed draws other finals.
    again = FreezeThawIndex(curve_model, epochs, incumbent, 64, seed=3, pending=curve_model.train_X[leader])
    assert torch.equal(again.pending_incumbents(), incumbents)
    other = FreezeThawIndex(curve_model, epochs, incumbent, 64, seed=4, pending=curve_model.train_X[leader])
    assert not torch.equal(other.pending_incumbents(), incumbents)
    with pytest.raises(ValueError, match="pending must be p x"):
        FreezeThawIndex(curve_model, epochs, incumbent, 64, pending=curve_model.train_X[0])
