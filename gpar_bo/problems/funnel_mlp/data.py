"""Offline tabular classification data: scikit-learn's bundled sets, split and standardised.

:func:`load_dataset` returns a seeded, stratified train/validation split of one of the data
sets that ship inside scikit-learn (no download), or of ``classification``, a seeded
synthetic task drawn by scikit-learn's ``make_classification`` (real training curves on
data that none of the real tables uses: a development table for the funnel family), with
the features standardised by the training part's mean and standard deviation (constant
features are only centred).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpar_bo.problems.splits import ClassificationSplit, check_split_arguments

__all__ = ["DATASETS", "DEFAULT_VAL_FRACTION", "TabularData", "load_dataset"]

#: Name -> (function of ``sklearn.datasets``, its arguments) of each data set.
DATASETS: dict[str, tuple[str, dict[str, Any]]] = {
    "digits": ("load_digits", {}),  # 1,797 8x8 digit images, 64 features, 10 classes
    "breast_cancer": ("load_breast_cancer", {}),  # 569 tumours, 30 features, 2 classes
    # 1,500 points, 4 classes of two Gaussian clusters each in 8 informative dimensions,
    # 3 % of the labels flipped, so no setting reaches a validation error of 0.
    "classification": ("make_classification", {
        "n_samples": 1500, "n_features": 30, "n_informative": 8, "n_redundant": 6,
        "n_classes": 4, "n_clusters_per_class": 2, "flip_y": 0.03, "random_state": 0,
    }),
}

#: Validation fraction: one third held out, as in LCBench's splits.
DEFAULT_VAL_FRACTION = 1.0 / 3.0


@dataclass(frozen=True)
class TabularData(ClassificationSplit):
    """A standardised train/validation split.

    The features (:class:`~gpar_bo.problems.splits.ClassificationSplit`) are float32,
    standardised with the training part's statistics.

    Attributes:
        name: the data set's key in :data:`DATASETS`.
        n_classes: number of classes of the whole data set.
    """

    name: str
    n_classes: int


def _stratified_split(y: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, val): each class contributes ``round(count * val_fraction)`` to val."""
    rng = np.random.default_rng(seed)
    val: list[np.ndarray] = []
    train: list[np.ndarray] = []
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        k = int(round(len(members) * val_fraction))
        val.append(members[:k])
        train.append(members[k:])
    # Shuffle the concatenations so neither part is ordered by class.
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(val))


def load_dataset(
    name: str = "digits",
    *,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    split_seed: int = 0,
    max_examples: int | None = None,
) -> TabularData:
    """Load a bundled scikit-learn data set as a seeded, stratified, standardised split.

    Args:
        name: a key of :data:`DATASETS` (``"digits"``, ``"breast_cancer"`` or ``"classification"``).
        val_fraction: fraction of each class held out for validation, in ``(0, 1)``.
        split_seed: seed of the split.
        max_examples: keep only a seeded random subset of this many examples before
            splitting (quick tests and smoke runs).

    Raises:
        ValueError: an unknown name, an invalid fraction, or a split leaving a part empty.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; expected one of {sorted(DATASETS)}")
    check_split_arguments(val_fraction, max_examples)
    import sklearn
    from sklearn import datasets

    function, arguments = DATASETS[name]
    data = getattr(datasets, function)(**arguments)
    x, y = data if isinstance(data, tuple) else (data.data, data.target)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    n_classes = int(y.max()) + 1
    call = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    source = f"scikit-learn {sklearn.__version__} datasets.{function}({call}) ({len(y)} examples)"
    if max_examples is not None:
        keep = np.sort(np.random.default_rng([split_seed, 1]).permutation(len(y))[:max_examples])
        x, y = x[keep], y[keep]
        source += f", subset of {len(y)}"
    train_idx, val_idx = _stratified_split(y, val_fraction, split_seed)
    if len(train_idx) == 0 or len(val_idx) == 0:
        raise ValueError(f"val_fraction={val_fraction} leaves no training or no validation examples")
    mean = x[train_idx].mean(axis=0)
    std = x[train_idx].std(axis=0)
    std[std == 0] = 1.0  # constant features (e.g. digits' corner pixels): centre only
    z = ((x - mean) / std).astype(np.float32)
    return TabularData.from_indices(
        z, y, train_idx, val_idx,
        source + f"; stratified split_seed={split_seed}, val_fraction={val_fraction:.6g}, "
        "standardised with the training mean and std",
        name=name, n_classes=n_classes,
    )
