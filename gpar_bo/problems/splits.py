"""A classification data set cut into a training and a validation part (every problem's data).

:class:`ClassificationSplit` holds the two parts as tensors;
:meth:`ClassificationSplit.from_indices` cuts them from arrays by index. How the indices
are drawn (a plain or a stratified permutation) and how the features are scaled is the
problem's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

__all__ = ["ClassificationSplit", "check_split_arguments"]

S = TypeVar("S", bound="ClassificationSplit")


def check_split_arguments(val_fraction: float, max_examples: int | None) -> None:
    """Raise ``ValueError`` for a validation fraction outside ``(0, 1)`` or fewer than 2 examples."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if max_examples is not None and max_examples < 2:
        raise ValueError(f"max_examples must be at least 2, got {max_examples}")


@dataclass(frozen=True)
class ClassificationSplit:
    """A train/validation split of a classification data set.

    Attributes:
        x_train: ``(n_train, d)`` float32 features.
        y_train: ``(n_train,)`` int64 class labels in ``0..n_classes-1``.
        x_val: ``(n_val, d)`` float32 features.
        y_val: ``(n_val,)`` int64 class labels.
        source: where the data came from and how it was split (recorded in the
            provenance of generated data).
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    source: str

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_val(self) -> int:
        return int(self.x_val.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])

    @classmethod
    def from_indices(
        cls: type[S],
        x: np.ndarray,
        y: np.ndarray,
        train_idx: Sequence[int] | np.ndarray,
        val_idx: Sequence[int] | np.ndarray,
        source: str,
        **fields: Any,
    ) -> S:
        """The split whose parts are rows ``train_idx`` and ``val_idx`` of ``(x, y)``.

        Args:
            x: ``(n, d)`` float32 features.
            y: ``(n,)`` int64 labels.
            train_idx: row indices of the training part, in order.
            val_idx: row indices of the validation part, in order.
            source: the split's description.
            fields: the subclass's own fields.
        """
        return cls(
            x_train=torch.from_numpy(np.ascontiguousarray(x[train_idx])),
            y_train=torch.from_numpy(np.ascontiguousarray(y[train_idx])),
            x_val=torch.from_numpy(np.ascontiguousarray(x[val_idx])),
            y_val=torch.from_numpy(np.ascontiguousarray(y[val_idx])),
            source=source,
            **fields,
        )
