"""GPARCurveModel on Ax's learning-curve rows, without an Ax loop."""

from __future__ import annotations

import torch
from botorch.acquisition.objective import ScalarizedPosteriorTransform

from gpar_bo import GPARModel
from gpar_bo.ax import GPARCurveModel
from gpar_bo.curve_model import LogIncrements
from tests.helpers import EPOCHS, fit, partial_curves


def ax_rows(X: torch.Tensor, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Ax's training rows of curves ``Y`` (``n x M``, NaN suffixes): ``[x, step]`` with
    the step rescaled to [0, 1], and the values (``r x 1``)."""
    steps = torch.tensor(EPOCHS, dtype=X.dtype)
    steps = (steps - steps[0]) / (steps[-1] - steps[0])
    run, m = (~Y.isnan()).nonzero(as_tuple=True)
    return torch.cat([X[run], steps[m].unsqueeze(-1)], -1), Y[run, m].unsqueeze(-1)


def test_loading_a_state_without_refitting_matches_a_fresh_model_on_the_new_data() -> None:
    # Ax's Surrogate loads a fitted model's state into a model on other data without
    # refitting (e.g. for cross-validation); with denoise, the inputs fed to later
    # conditionals depend on the hyperparameters and must be recomputed.
    X, Y = partial_curves(n=30)
    options = {"denoise": True}
    fitted = GPARCurveModel(*ax_rows(X, Y), EPOCHS, step_index=-1, gpar_options=options)
    fit(fitted.gpar, maxiter=30)  # fitted values, not converged ones, are what is loaded
    X_new, Y_new = X[:24], Y[:24]
    loaded = GPARCurveModel(*ax_rows(X_new, Y_new), EPOCHS, step_index=-1, gpar_options=options)
    loaded.load_state_dict(fitted.state_dict())

    reference = GPARModel(X_new, Y_new, output_names=[float(e) for e in EPOCHS], **options)
    reference.load_state_dict(fitted.gpar.hyperparameters(), strict=False)
    test_X = torch.rand(6, 2, dtype=torch.double, generator=torch.Generator().manual_seed(1))
    expected = reference.posterior(test_X.unsqueeze(-2), output_indices=[len(EPOCHS) - 1])
    final = torch.cat([test_X, torch.ones(6, 1, dtype=test_X.dtype)], -1).unsqueeze(-2)
    actual = loaded.posterior(final)
    torch.testing.assert_close(actual.mean, expected.mean)
    torch.testing.assert_close(actual.variance, expected.variance)


def test_default_variant_scalarises_the_untransformed_final_value() -> None:
    # Ax minimises through a scalarisation with weight -1 of the final checkpoint's
    # value; with log increments that value is exp of the sum of every output.
    X, Y = partial_curves(n=16)
    model = GPARCurveModel(*ax_rows(X, Y), EPOCHS, step_index=-1)
    assert isinstance(model.gpar.outcome_transform, LogIncrements)
    fit(model.gpar)
    test_X = torch.rand(3, 2, dtype=X.dtype, generator=torch.Generator().manual_seed(2))
    final = torch.cat([test_X, torch.ones(3, 1, dtype=X.dtype)], -1).unsqueeze(-2)  # 3 x 1 x 3
    weights = torch.tensor([-1.0], dtype=X.dtype)
    posterior = model.posterior(final, posterior_transform=ScalarizedPosteriorTransform(weights))
    base = torch.randn(32, 3, 1, len(EPOCHS), dtype=X.dtype,
                       generator=torch.Generator().manual_seed(3))
    samples = posterior.rsample_from_base_samples(torch.Size([32]), base)
    modelled = model.gpar.modelled_posterior(test_X.unsqueeze(-2))
    increments = modelled.rsample_from_base_samples(torch.Size([32]), base)
    torch.testing.assert_close(samples, -increments.sum(-1, keepdim=True).exp())
