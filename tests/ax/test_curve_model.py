"""GPARCurveModel on Ax's learning-curve rows, without an Ax loop."""

from __future__ import annotations

import torch

from gpar_bo import GPARModel
from gpar_bo.ax import GPARCurveModel
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
    fit(fitted.gpar)
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
