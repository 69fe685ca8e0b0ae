"""The Gittins index of the freeze-thaw policy: closed forms and monotonicity."""

from __future__ import annotations

import torch

from gpar_bo.freeze_thaw import expected_improvement_lognormal, stopping_index

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
