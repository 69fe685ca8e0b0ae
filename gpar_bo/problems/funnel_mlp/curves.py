"""Funnel-MLP learning-curve tables: sample the search space, generate resumably, load.

The table layout, resumability and provenance are those of
:mod:`gpar_bo.problems.curves_io`; the hyperparameter columns are :data:`HPARAM_NAMES`
(``batch_size, learning_rate, momentum, weight_decay, num_layers, max_units,
max_dropout``), stored as raw values (not logs), and ``val_loss_e`` / ``val_error_e`` are
the validation cross-entropy and error rate after epoch ``e`` (``E = 50`` for the shipped
tables; a diverged run's loss is ``inf`` and its error 1.0, see
:mod:`gpar_bo.problems.funnel_mlp.mlp`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpar_bo.problems import curves_io
from gpar_bo.problems.funnel_mlp.data import TabularData, load_dataset
from gpar_bo.problems.funnel_mlp.mlp import HPARAM_NAMES, SEARCH_SPACE, FunnelHyperparameters, train

__all__ = [
    "DEFAULT_EPOCHS",
    "sample_setting",
    "sample_settings",
    "generate_curves",
    "load_curves",
    "to_unit_cube",
]

#: Epochs of the shipped tables (LCBench's 50).
DEFAULT_EPOCHS = 50


def sample_setting(seed: int, index: int) -> FunnelHyperparameters:
    """Setting ``index`` of the sample with ``seed``: uniform in :data:`SEARCH_SPACE`.

    Each hyperparameter is drawn uniformly in its range, in log space where the range is
    logarithmic. An integer hyperparameter is drawn uniformly in ``[low - 0.5, high + 0.5]``
    (on the log scale if logarithmic) and rounded, so every integer gets the share of the
    range nearest to it. Continuous values are rounded to 10 significant digits (the
    precision the CSV stores), so the stored value is exactly the trained one. Depends
    only on ``(seed, index)``.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, index], spawn_key=(1,)))
    values: dict[str, float] = {}
    for name, r in SEARCH_SPACE.items():
        low, high = (r.low - 0.5, r.high + 0.5) if r.integer else (r.low, r.high)
        if r.log:
            value = math.exp(rng.uniform(math.log(low), math.log(high)))
        else:
            value = rng.uniform(low, high)
        if r.integer:
            value = min(max(int(round(value)), int(r.low)), int(r.high))
        else:
            value = float(f"{value:.10g}")
        values[name] = value
    return FunnelHyperparameters(**values)


def sample_settings(n: int, seed: int) -> list[FunnelHyperparameters]:
    """Settings ``0..n-1`` of the sample with ``seed`` (prefix-stable)."""
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    return [sample_setting(seed, i) for i in range(n)]


def to_unit_cube(X: torch.Tensor) -> torch.Tensor:
    """Map raw settings (``(n, 7)``, :data:`HPARAM_NAMES` order) to the unit cube.

    Each column is scaled by its :data:`SEARCH_SPACE` range, through the log where the
    range is logarithmic; the range, not the sample, defines the cube.
    """
    if X.shape[-1] != len(HPARAM_NAMES):
        raise ValueError(f"expected {len(HPARAM_NAMES)} columns, got {X.shape[-1]}")
    columns = []
    for j, r in enumerate(SEARCH_SPACE.values()):
        x, lo, hi = X[..., j], torch.tensor(r.low, dtype=X.dtype), torch.tensor(r.high, dtype=X.dtype)
        if r.log:
            x, lo, hi = x.log(), lo.log(), hi.log()
        columns.append((x - lo) / (hi - lo))
    return torch.stack(columns, dim=-1)


def generate_curves(
    path: str | Path,
    n_settings: int,
    *,
    seed: int = 0,
    data: TabularData | None = None,
    epochs: int = DEFAULT_EPOCHS,
    **options: Any,
) -> int:
    """Train ``n_settings`` sampled settings and append their curves to ``path``, resumably.

    See :func:`gpar_bo.problems.curves_io.generate_curves` for resuming and provenance.

    Args:
        path: output CSV (created with a header if missing).
        n_settings: total number of settings the file should end up with.
        seed: sampling seed; setting ``i`` trains with ``train_seed_for(seed, i)``.
        data: the split; ``None`` loads :func:`load_dataset` ``("digits")``.
        epochs: epochs per setting (the cosine schedule anneals over these).
        options: ``progress``, ``command``, ``max_new`` of
            :func:`gpar_bo.problems.curves_io.generate_curves`.

    Returns:
        The number of settings trained in this call.
    """
    import sklearn

    if n_settings < 1:
        raise ValueError(f"n_settings must be at least 1, got {n_settings}")
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    if data is None:
        data = load_dataset("digits")
    settings = sample_settings(n_settings, seed)
    provenance = {
        "description": f"Validation learning curves of LCBench-style funnel MLPs "
        f"(gpar_bo.problems.funnel_mlp) on {data.name}, one row per setting sampled uniformly "
        "from the search space (log scale where marked).",
        "search_space": {
            name: {"low": r.low, "high": r.high, "log": r.log, "integer": r.integer}
            for name, r in SEARCH_SPACE.items()
        },
        "dataset": data.name,
        "data_source": data.source,
        "n_train": data.n_train,
        "n_val": data.n_val,
        "n_features": data.n_features,
        "n_classes": data.n_classes,
        "training": "funnel MLP (Linear-ReLU-Dropout hidden layers, widths and dropout falling "
        "linearly from max_units/max_dropout towards the output), cross-entropy, "
        "SGD(momentum, weight_decay), cosine annealing over the epochs stepped per epoch",
    }
    return curves_io.generate_curves(
        path, settings, lambda hp, train_seed: train(hp, data, epochs=epochs, seed=train_seed),
        hparam_names=HPARAM_NAMES, epochs=epochs, seed=seed, provenance=provenance,
        versions=curves_io.package_versions(**{"scikit-learn": sklearn.__version__}), **options,
    )


def load_curves(
    path: str | Path, epochs: Sequence[int] | None = None, metric: str = "error"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load a funnel-MLP curve CSV as ``(X, Y)``.

    Args:
        path: a CSV written by :func:`generate_curves`.
        epochs: checkpoint epochs to keep, in output order (default: every epoch).
        metric: ``"error"`` or ``"loss"``.

    Returns:
        ``X``: ``(n, 7)`` float64 raw hyperparameters in :data:`HPARAM_NAMES` order (use
        :func:`to_unit_cube` to scale them); ``Y``: ``(n, len(epochs))`` float64.
    """
    if epochs is None:
        header, _ = curves_io.read_curve_rows(path, HPARAM_NAMES)
        epochs = range(1, sum(c.startswith("val_error_") for c in header) + 1)
    return curves_io.load_curves(path, HPARAM_NAMES, epochs, metric)
