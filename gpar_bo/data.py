"""Validation of GPAR training data.

GPAR trains exactly on *closed-downwards* data: every row's observed outputs
form a prefix ``y_1, ..., y_k`` of the output ordering (a training run that
stopped early reports the checkpoints it reached). These checks turn every
other kind of input into an error that names the problem, so nothing is
silently dropped.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

#: How many observations each conditional GP needs at least: with fewer, the
#: outcome standardisation and the hyperparameters are not identifiable.
MIN_OBSERVATIONS_PER_OUTPUT = 2


class TooFewObservationsError(ValueError):
    """An output has fewer than ``MIN_OBSERVATIONS_PER_OUTPUT`` observations."""


def _rows(index: Tensor, limit: int = 10) -> str:
    rows = index.tolist()
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f", ... ({len(rows)} rows)" if len(rows) > limit else "")


def check_inputs(
    X: Tensor, d: int | None = None, name: str = "X", dtype: torch.dtype | None = None
) -> None:
    """Check that ``X`` is a finite ``... x n x d`` tensor with at least one point.

    Args:
        X: A ``batch_shape x n x d`` tensor.
        d: The expected number of input dimensions, if known.
        name: What to call the tensor in error messages.
        dtype: The expected dtype (the model's), if known.
    """
    if not torch.is_tensor(X) or not X.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor.")
    if X.dim() < 2:
        raise ValueError(f"{name} must have shape `... x n x d`; got {tuple(X.shape)}.")
    if d is not None and X.shape[-1] != d:
        raise ValueError(
            f"{name} has {X.shape[-1]} input dimensions; the model was trained on {d}."
        )
    # An empty batch (``0 x q x d``) has no points either; without this check
    # it reaches the posterior's moments and fails there.
    if X.shape[:-1].numel() == 0:
        raise ValueError(f"{name} has no points; got shape {tuple(X.shape)}.")
    if dtype is not None and X.dtype != dtype:
        raise ValueError(
            f"{name} is {X.dtype} but the model is {dtype}; convert it, e.g. "
            f"`{name}.to(model.train_X)`."
        )
    bad = ~torch.isfinite(X)
    if bad.any():
        kind = "NaN" if torch.isnan(X).any() else "non-finite values"
        rows = bad.reshape(-1, X.shape[-1]).any(-1).nonzero().squeeze(-1)
        raise ValueError(f"{name} contains {kind} (rows {_rows(rows)}).")


def check_training_data(train_X: Tensor, train_Y: Tensor, impute: bool) -> Tensor:
    """Validate GPAR training data and return its observation mask.

    Args:
        train_X: An ``n x d`` tensor of inputs (e.g. hyperparameters).
        train_Y: An ``n x M`` tensor of outputs, NaN where not (yet) observed.
        impute: Whether rows that are not closed downwards are allowed (their
            missing earlier outputs will be imputed).

    Returns:
        An ``n x M`` boolean tensor, True where ``train_Y`` is observed.

    Raises:
        TooFewObservationsError: An output has too few observations to fit.
        ValueError: Any other problem with the data (``TypeError`` for a dtype).
    """
    check_inputs(train_X, name="train_X")
    if train_X.dtype not in (torch.float32, torch.float64):
        raise TypeError(
            f"train_X is {train_X.dtype}; GPAR needs float32 or float64 (its Cholesky "
            "factorisations are not available in lower precision)."
        )
    if train_X.dim() != 2:
        raise ValueError(f"train_X must be `n x d`; got shape {tuple(train_X.shape)}.")
    if not torch.is_tensor(train_Y) or train_Y.dim() != 2:
        raise ValueError("train_Y must be an `n x M` tensor (NaN where unobserved).")
    if train_Y.shape[0] != train_X.shape[0]:
        raise ValueError(
            f"train_X has {train_X.shape[0]} rows but train_Y has {train_Y.shape[0]}."
        )
    if train_Y.dtype != train_X.dtype:
        raise ValueError(
            f"train_X ({train_X.dtype}) and train_Y ({train_Y.dtype}) differ in dtype."
        )
    infinite = torch.isinf(train_Y)
    if infinite.any():
        rows = infinite.any(-1).nonzero().squeeze(-1)
        raise ValueError(
            f"train_Y contains infinite values (rows {_rows(rows)}); mark missing "
            "outputs with NaN."
        )
    observed = ~torch.isnan(train_Y)
    empty_rows = (~observed.any(-1)).nonzero().squeeze(-1)
    if len(empty_rows):
        raise ValueError(
            f"Rows {_rows(empty_rows)} of train_Y have no observed output; remove "
            "them (they carry no information for GPAR)."
        )
    counts = observed.sum(0)
    for m, count in enumerate(counts.tolist()):
        if count < MIN_OBSERVATIONS_PER_OUTPUT:
            raise TooFewObservationsError(
                f"Output {m} has {count} observation(s); each output needs at least "
                f"{MIN_OBSERVATIONS_PER_OUTPUT} to fit its conditional GP."
            )
    gaps = (observed[:, 1:] & ~observed[:, :-1]).any(-1)
    if gaps.any() and not impute:
        raise ValueError(
            f"train_Y is not closed downwards: rows {_rows(gaps.nonzero().squeeze(-1))} "
            "observe an output without all earlier ones. Reorder the outputs, or pass "
            "impute=True to fill the gaps with the model's posterior mean."
        )
    return observed


def resolve_output_names(
    output_names: Sequence[Hashable] | None, num_outputs: int
) -> list[Hashable]:
    """Default or validate the output names (e.g. checkpoint epochs)."""
    if output_names is None:
        return list(range(num_outputs))
    names = list(output_names)
    if len(names) != num_outputs:
        raise ValueError(
            f"Got {len(names)} output names for {num_outputs} outputs."
        )
    if len(set(names)) != len(names):
        raise ValueError(f"Output names must be unique; got {names}.")
    return names
