"""Inducing-point (SGPR) conditionals for large N."""

from __future__ import annotations

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms.input import Normalize
from tests.helpers import fit
from gpytorch.kernels import InducingPointKernel, RBFKernel
from gpytorch.settings import sgpr_diagonal_correction

import gpar_bo.conditionals
from gpar_bo import GPARModel, KernelFamily
from gpar_bo.conditionals import conditional_gp, input_bounds
from gpar_bo.kernels import Conventions
from gpar_bo.prediction import ConditionalPredictor, output_scaling


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


# ------------------------------------- the hand-written caches, pinned to GPyTorch
def _conditional(conventions: str, num_inducing: int | None, dtype: torch.dtype) -> tuple[SingleTaskGP, torch.Tensor]:
    """A conditional over x (1 column) and two earlier outputs, with fitted-like
    hyperparameters, and its training inputs."""
    generator = torch.Generator().manual_seed(4)
    x = torch.rand(40, 1, generator=generator, dtype=torch.double)
    earlier = torch.cat([torch.sin(5 * x), x**2], -1) + 0.05 * torch.randn(40, 2, generator=generator, dtype=torch.double)
    targets = earlier[:, :1] * x + 0.1 * torch.randn(40, 1, generator=generator, dtype=torch.double)
    inputs = torch.cat([x, earlier], -1).to(dtype)
    targets = targets.to(dtype)
    inducing = None
    if num_inducing:
        inducing = inputs[torch.randperm(40, generator=generator)[:num_inducing]]
    gp = conditional_gp(
        inputs, targets, input_bounds([inputs]), x_dims=1, family=KernelFamily.L_NL,
        use_rbf_kernel=True, conventions=Conventions(conventions), inducing_inputs=inducing,
    )
    with torch.no_grad():  # away from the starting values, as after a fit
        for name, parameter in gp.named_parameters():
            if "inducing" not in name:
                parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator, dtype=torch.double).to(dtype))
    return gp, inputs


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("num_inducing", [None, 15], ids=["exact", "sgpr"])
@pytest.mark.parametrize("conventions", ["botorch", "paper"])
def test_predictor_matches_gpytorchs_posterior(conventions: str, num_inducing: int | None, dtype: torch.dtype) -> None:
    # The predictor re-derives GPyTorch's exact and SGPR prediction caches (to
    # avoid expanding the training data over sample batches): pin it to
    # GPyTorch's own prediction strategies through BoTorch's posterior, at
    # inputs with one and two batch dimensions.
    gp, inputs = _conditional(conventions, num_inducing, dtype)
    sparse = isinstance(gp.covar_module, InducingPointKernel)
    assert sparse == bool(num_inducing)
    predictor = ConditionalPredictor(gp, inputs)
    _, y_std = output_scaling(gp)
    generator = torch.Generator().manual_seed(5)
    for shape in [(3, 4), (2, 3, 4)]:
        Z = torch.rand(*shape, 3, generator=generator, dtype=torch.double).to(dtype)
        # Posterior covariances are prior minus explained covariance: in float32 both
        # routes carry round-off relative to the prior variance, not to the result.
        prior = predictor.kernel(gp.input_transform(Z), diag=True).detach().max() * y_std**2
        tolerance = {} if dtype == torch.float64 else {"rtol": 1e-3, "atol": 1e-3 * float(prior)}
        mean, covar = predictor(Z)
        _, variance = predictor(Z, joint=False)
        # GPyTorch's SGPR adds a FITC-like diagonal correction by default; Titsias'
        # bound, which the conditionals are fitted to, has none.
        with sgpr_diagonal_correction(False):
            posterior = gp.posterior(Z)
            expected = posterior.covariance_matrix
            if sparse:
                # GPyTorch's SGPR covariance is the DTC one, built on the low-rank
                # prior Q(Z, Z) = k_zu K_uu^{-1} k_uz; Titsias' predictive (p(f|u)
                # integrated against q(u)) keeps the prior's remainder K - Q.
                Zt = gp.input_transform(Z)
                remainder = gp.covar_module.base_kernel(Zt).to_dense() - gp.covar_module(Zt).to_dense()
                expected = expected + remainder.detach() * y_std**2
        torch.testing.assert_close(mean, posterior.mean.squeeze(-1), **tolerance)
        torch.testing.assert_close(covar, expected, **tolerance)
        torch.testing.assert_close(variance, expected.diagonal(dim1=-2, dim2=-1), **tolerance)
