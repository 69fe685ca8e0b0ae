"""Inducing-point (SGPR) conditionals for large N."""

from __future__ import annotations

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from tests.helpers import fit
from gpytorch.kernels import InducingPointKernel, RBFKernel

import gpar_bo.conditionals
from gpar_bo import GPARModel
from gpar_bo.prediction import ConditionalPredictor


def _data(n: int = 300) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(n, 1, generator=generator, dtype=torch.double)
    y1 = torch.sin(6 * x) + 0.05 * torch.randn(n, 1, generator=generator, dtype=torch.double)
    y2 = y1**2 + 0.05 * torch.randn(n, 1, generator=generator, dtype=torch.double)
    return x, torch.cat([y1, y2], -1)


def test_sparse_predictions_match_exact_ones() -> None:
    x, y = _data()
    exact = fit(GPARModel(x, y, kernel="NL"))
    sparse = fit(GPARModel(x, y, kernel="NL", num_inducing=40))
    assert all(isinstance(gp.covar_module, InducingPointKernel) for gp in sparse.conditionals)
    x_test = torch.linspace(0.05, 0.95, 20, dtype=torch.double).view(20, 1, 1)
    torch.testing.assert_close(
        sparse.posterior(x_test).mean, exact.posterior(x_test).mean, rtol=0, atol=0.03
    )
    assert torch.isfinite(sparse.log_evidence())
    # Titsias' bound is a lower bound on the (nearly equal) exact evidence.
    assert sparse.log_evidence() < exact.log_evidence() + 1.0


def test_inducing_inputs_follow_the_papers_recipe() -> None:
    x, y = _data(120)
    model = fit(GPARModel(x, y, num_inducing=16))
    second = model.conditionals[1]
    inducing = second.input_transform.untransform(second.covar_module.inducing_points)
    grid = x.min() + (x.max() - x.min()) * torch.linspace(0, 1, 16, dtype=torch.double)
    torch.testing.assert_close(inducing[:, 0], grid)
    # The y column holds output 1's posterior mean at those x.
    expected = model.posterior(inducing[:, :1].unsqueeze(-2)).mean[:, 0, 0]
    torch.testing.assert_close(inducing[:, 1], expected)
    assert not second.covar_module.inducing_points.requires_grad


def test_learned_inducing_points_move() -> None:
    x, y = _data(120)
    model = GPARModel(x, y, num_inducing=8, learn_inducing_points=True)
    before = model.conditionals[0].covar_module.inducing_points.detach().clone()
    fit(model)
    after = model.conditionals[0].covar_module.inducing_points.detach()
    assert not torch.allclose(before, after)


def test_sparse_is_used_automatically_above_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpar_bo.conditionals, "SPARSE_ABOVE", 100)
    monkeypatch.setattr(gpar_bo.conditionals, "DEFAULT_NUM_INDUCING", 20)
    x, y = _data(150)
    y[90:, 1] = float("nan")  # output 2 has 90 rows: stays exact
    model = GPARModel(x, y)
    assert isinstance(model.conditionals[0].covar_module, InducingPointKernel)
    assert model.conditionals[0].covar_module.inducing_points.shape == (20, 1)
    assert not isinstance(model.conditionals[1].covar_module, InducingPointKernel)
    with pytest.raises(ValueError, match="num_inducing"):
        GPARModel(x, y, num_inducing=0)


def test_sgpr_predictive_is_exact_when_inducing_points_are_the_data() -> None:
    x, y = _data(25)
    bounds = torch.tensor([[0.0], [1.0]], dtype=torch.double)
    exact = SingleTaskGP(x, y[:, :1], input_transform=Normalize(1, bounds=bounds))
    exact.covar_module = RBFKernel().double()
    exact.covar_module.lengthscale = 0.1  # K_uu stays well conditioned
    sparse = SingleTaskGP(
        x, y[:, :1], likelihood=exact.likelihood, input_transform=Normalize(1, bounds=bounds)
    )
    sparse.covar_module = InducingPointKernel(
        exact.covar_module, inducing_points=x.clone(), likelihood=exact.likelihood
    )
    z = torch.rand(6, 1, 1, dtype=torch.double, generator=torch.Generator().manual_seed(0))
    mean_e, var_e = ConditionalPredictor(exact, x)(z, joint=False)
    mean_s, var_s = ConditionalPredictor(sparse, x)(z, joint=False)
    torch.testing.assert_close(mean_s, mean_e, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(var_s, var_e, rtol=1e-3, atol=1e-5)
