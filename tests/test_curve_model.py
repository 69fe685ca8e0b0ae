"""The learning-curve variant: ``LogIncrements`` and ``curve_model_options``."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models.transforms.outcome import Log

from gpar_bo import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.curve_model import (
    LogIncrements,
    curve_model_options,
    floor_zeros,
    resolve_gpar_options,
    to_increments,
)
from tests.helpers import EPOCHS, partial_curves

#: A quick fit (the tests compare models fitted alike, not fit quality).
QUICK = {"optimizer_kwargs": {"options": {"maxiter": 30}}}


def fitted(model: GPARModel) -> GPARModel:
    fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model), **QUICK)
    return model.eval()


# ------------------------------------------------------------------ the transform
def test_log_increments_by_hand_with_nan_suffixes() -> None:
    Y = torch.tensor([[0.5, 0.25, 0.2], [0.8, 0.4, math.nan], [0.3, math.nan, math.nan]],
                     dtype=torch.double)
    Z, Zvar = LogIncrements()(Y)
    log = math.log
    expected = torch.tensor(
        [[log(0.5), log(0.5), log(0.8)], [log(0.8), log(0.5), math.nan], [log(0.3), math.nan, math.nan]],
        dtype=torch.double,
    )
    assert Zvar is None
    torch.testing.assert_close(Z, expected, equal_nan=True)
    back, _ = LogIncrements().untransform(Z)
    torch.testing.assert_close(back, Y, equal_nan=True)
    # A prefix of the outputs untransforms to the same prefix (triangular).
    torch.testing.assert_close(LogIncrements().untransform(Z[:, :2])[0], Y[:, :2], equal_nan=True)


def test_measurement_variances_map_by_the_delta_method() -> None:
    Y = torch.tensor([[0.5, 0.25, 0.2], [0.4, 0.1, math.nan]], dtype=torch.double)
    Yvar = torch.tensor([[0.01, 0.002, 0.003], [0.004, 0.001, math.nan]], dtype=torch.double)
    log_var = Yvar / Y**2  # Var(log y) = Var(y) / y^2
    expected = torch.stack([log_var[:, 0], log_var[:, 1] + log_var[:, 0], log_var[:, 2] + log_var[:, 1]], -1)
    Z, Zvar = LogIncrements()(Y, Yvar)
    torch.testing.assert_close(Zvar, expected, equal_nan=True)
    torch.testing.assert_close(Z, to_increments(Y.log()), equal_nan=True)


def test_round_trip_on_curves_and_same_values_as_the_policy_had() -> None:
    _, Y = partial_curves()
    Z, _ = LogIncrements()(Y)
    assert torch.equal(Z.isnan(), Y.isnan())
    # Bit for bit what FreezeThawPolicy computed by hand before the transform existed.
    old = torch.cat([Y.log()[..., :1], Y.log().diff(dim=-1)], -1)
    assert torch.equal(Z.nan_to_num(), old.nan_to_num())
    torch.testing.assert_close(LogIncrements().untransform(Z)[0], Y, equal_nan=True)
    torch.testing.assert_close(to_increments(Y.log()).cumsum(-1), Y.log(), equal_nan=True)


def test_a_zero_is_half_the_smallest_positive_value() -> None:
    Y = torch.tensor([[0.5, 0.2, 0.0], [0.4, 0.1, math.nan]], dtype=torch.double)
    floored = floor_zeros(Y)
    assert floored[0, 2] == 0.05 and torch.equal(floored[:, :2], Y[:, :2])
    assert floored[1, 2].isnan()
    assert floor_zeros(floored) is floored  # nothing to floor: returned as it is
    Z, _ = LogIncrements()(Y)
    assert torch.equal(Z.nan_to_num(), LogIncrements()(floored)[0].nan_to_num())
    assert float(Z[0, 2]) == pytest.approx(math.log(0.05 / 0.2))


def test_bad_values_are_one_line_errors() -> None:
    for Y, match in [
        (torch.tensor([[0.5, -0.1, 0.2]]), "non-negative values"),
        (torch.tensor([[0.0, 0.0, math.nan]]), "Every observed value is 0"),
        (torch.tensor([[0.5, math.nan, 0.2]]), "prefix"),
    ]:
        with pytest.raises(ValueError, match=match) as error:
            LogIncrements()(Y)
        assert "\n" not in str(error.value)
    X, Y = partial_curves(n=12)
    with pytest.raises(ValueError, match="outcome_transform=None"):
        GPARModel(X, Y - 0.5, **curve_model_options())


# -------------------------------------------------------------------- the options
def test_options_are_fresh_and_given_options_replace_the_default() -> None:
    first, second = curve_model_options(), curve_model_options(noise_prior="gamma")
    assert first["kernel"] == "NL-X" and first["denoise"] is True
    assert isinstance(first["outcome_transform"], LogIncrements)
    assert first["outcome_transform"] is not second["outcome_transform"]
    assert second["noise_prior"] == "gamma"
    assert curve_model_options(outcome_transform=None)["outcome_transform"] is None
    assert resolve_gpar_options(None).keys() == first.keys()
    given = {"kernel": "L", "outcome_transform": Log()}
    resolved = resolve_gpar_options(given)
    assert resolved.keys() == given.keys()  # not merged with the default
    assert resolved["outcome_transform"] is not given["outcome_transform"]  # a copy
    assert resolve_gpar_options({}) == {}


# ------------------------------------------------------------ the model's posterior
@pytest.fixture(scope="module")
def model() -> GPARModel:
    torch.set_num_threads(1)
    X, Y = partial_curves(n=16)
    return fitted(GPARModel(X, Y, output_names=EPOCHS, **curve_model_options()))


def test_same_model_as_fitting_on_increments(model: GPARModel) -> None:
    """The transform changes nothing of the fit: the policy's decisions stay the same."""
    X, Y = model.train_X, model.train_Y
    options = curve_model_options(outcome_transform=None)
    by_hand = fitted(GPARModel(X, to_increments(Y.log()), output_names=EPOCHS, **options))
    assert torch.equal(model.modelled_Y.nan_to_num(), by_hand.modelled_Y.nan_to_num())
    mine, theirs = model.hyperparameters(), by_hand.hyperparameters()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    Xq = torch.rand(3, 1, 2, dtype=X.dtype, generator=torch.Generator().manual_seed(1))
    base = torch.randn(8, 3, 1, 5, dtype=X.dtype, generator=torch.Generator().manual_seed(2))
    a = model.modelled_posterior(Xq).rsample_from_base_samples(torch.Size([8]), base)
    b = by_hand.posterior(Xq).rsample_from_base_samples(torch.Size([8]), base)
    assert torch.equal(a, b)


def test_posterior_samples_are_untransformed_modelled_samples(model: GPARModel) -> None:
    X = model.train_X
    # New settings, and training runs with 1, 3 and 5 observed checkpoints.
    lengths = model.observed.sum(-1)
    rows = [int((lengths == k).nonzero()[0]) for k in (1, 3, 5)]
    Xq = torch.cat([torch.rand(2, 2, dtype=X.dtype, generator=torch.Generator().manual_seed(3)),
                    X[rows]]).unsqueeze(-2)  # 5 x 1 x 2
    normals = torch.randn(16, 5, 1, 9, dtype=X.dtype, generator=torch.Generator().manual_seed(4))
    shape = torch.Size([16])
    for noise in (False, True):
        modelled = model.modelled_posterior(Xq, observation_noise=noise)
        # Noisy increments reported, latent ones fed: 4 noise normals more.
        assert modelled.base_sample_shape[-1] == (9 if noise else 5)
        base = normals[..., : modelled.base_sample_shape[-1]]
        z = modelled.rsample_from_base_samples(shape, base)
        # Observed increments are known: the runs' own values replace the samples.
        observed = model.observed[rows].unsqueeze(-2)  # 3 x 1 x 5
        z[:, 2:] = torch.where(observed, model.modelled_Y[rows].unsqueeze(-2), z[:, 2:])
        expected = z.cumsum(-1).exp()
        posterior = model.posterior(Xq, observation_noise=noise)
        torch.testing.assert_close(posterior.rsample_from_base_samples(shape, base), expected)
        # The final checkpoint alone: the same samples (it is a function of every output).
        final = model.posterior(Xq, output_indices=[4], observation_noise=noise)
        torch.testing.assert_close(final.rsample_from_base_samples(shape, base), expected[..., 4:])
        torch.testing.assert_close(final.mean, posterior.mean[..., 4:])
    # A run's observed checkpoints are reported as observed.
    samples = model.posterior(Xq).rsample_from_base_samples(shape, normals[..., :5])
    for i, row in enumerate(rows):
        k = int(lengths[row])
        torch.testing.assert_close(
            samples[:, 2 + i, 0, :k], model.train_Y[row, :k].expand(16, k)
        )
