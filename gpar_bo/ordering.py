"""Greedy output ordering by the evidence (paper, section 2).

GPAR needs an ordering of the outputs. When the data admit no natural one,
the paper picks it greedily: the first output is the one whose GP in x alone
has the highest evidence; the second the one with the highest conditional
evidence given x and the first; and so on. That fits ``M (M + 1) / 2``
conditionals instead of the ``M!`` of an exhaustive search. Outputs the user
wants to predict stay last, in the order given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botorch.fit import fit_gpytorch_mll
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from gpar_bo.data import check_training_data
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel


def greedy_output_order(
    train_X: Tensor,
    train_Y: Tensor,
    pinned_last: Sequence[int] = (),
    **model_kwargs: Any,
) -> list[int]:
    r"""The output ordering that greedily maximises GPAR's evidence.

    Orderings other than the natural one rarely keep data closed downwards,
    so every candidate model imputes (``impute=True``), as the paper does.
    Candidates are compared by the evidence of their outputs in the units
    each conditional is fitted in (standardised, or divided by their root
    mean square under the paper's conventions), so rescaling an output (e.g.
    changing its units) does not change the order.

    Args:
        train_X: An ``n x d`` tensor of inputs.
        train_Y: An ``n x M`` tensor of outputs, NaN where unobserved.
        pinned_last: Outputs (column indices) to place last, in this order,
            e.g. the ones to predict.
        **model_kwargs: Passed to every ``GPARModel`` (e.g. ``kernel="L-NL"``).

    Returns:
        A permutation of ``range(M)``: use ``train_Y[:, order]``.
    """
    check_training_data(train_X, train_Y, impute=True)
    M = train_Y.shape[-1]
    pinned = list(pinned_last)
    if len(set(pinned)) != len(pinned) or any(not 0 <= j < M for j in pinned):
        raise ValueError(f"pinned_last must be distinct outputs in [0, {M - 1}]; got {pinned}.")
    model_kwargs["impute"] = True
    order: list[int] = []
    fitted: GPARModel | None = None
    remaining = [j for j in range(M) if j not in pinned]
    while remaining:
        candidates = {
            j: _extend(train_X, train_Y, order + [j], fitted, model_kwargs) for j in remaining
        }
        scores = {
            j: float(m.conditional_log_evidences(standardized=True)[-1])
            for j, m in candidates.items()
        }
        best = max(scores, key=scores.__getitem__)
        order.append(best)
        remaining.remove(best)
        fitted = candidates[best]
    return order + pinned


def _extend(
    train_X: Tensor,
    train_Y: Tensor,
    columns: list[int],
    fitted: GPARModel | None,
    model_kwargs: dict[str, Any],
) -> GPARModel:
    """GPAR on ``columns`` whose first conditionals are ``fitted``'s; fit the last.

    Rows observing none of the columns carry no information about them and
    are left out of this candidate model (not of the final one).
    """
    Y = train_Y[:, columns]
    rows = ~Y.isnan().all(-1)
    model = GPARModel(train_X[rows], Y[rows], **model_kwargs)
    if fitted is None:
        fit_gpytorch_mll(GPARMarginalLogLikelihood(model.likelihood, model))
        return model
    # Reuse the earlier conditionals' hyperparameters (this also rebuilds the
    # imputed inputs; the candidate has other rows), then fit only the new conditional.
    model.load_state_dict(fitted.state_dict(), strict=False, keep_transforms=False)
    last = model.conditionals[-1]
    fit_gpytorch_mll(ExactMarginalLogLikelihood(last.likelihood, last))
    model.eval()
    return model

