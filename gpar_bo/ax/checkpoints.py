"""``Checkpoints``: the steps at which a learning-curve metric is reported.

The generation node, the early-stopping strategy and the tuning report all read
steps (``progression`` values, e.g. epochs) and need the checkpoint each one is.
Ax hands the generation node its steps rescaled to [0, 1] per metric (with the
smallest and largest step in the data); the experiment's data hold them raw.
``Checkpoints`` validates the declared steps once and matches both kinds with
one rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Checkpoints", "STEP_TOLERANCE"]

#: A step is a checkpoint if it lies within this fraction of the checkpoints' span
#: (first to final) of it; Ax's rescaling divides by that span, so in its [0, 1]
#: units this is an absolute distance. Rescaling is exact up to float rounding.
STEP_TOLERANCE = 1e-6


@dataclass(frozen=True, init=False)
class Checkpoints:
    """The increasing steps (e.g. epochs) at which a learning-curve metric is reported.

    Args:
        steps: Two or more finite, positive, increasing numbers (or another
            ``Checkpoints``); the last is the final checkpoint, GPAR's target.

    Raises:
        ValueError: ``steps`` is not such a sequence.
    """

    steps: tuple[float, ...]

    def __init__(self, steps: Iterable[float]) -> None:
        try:
            values = tuple(float(s) for s in steps)
        except (TypeError, ValueError):
            raise ValueError(f"Checkpoints must be numbers; got {steps!r}.") from None
        problem = (
            "at least two are needed" if len(values) < 2
            else "they must be finite" if not all(math.isfinite(v) for v in values)
            else "they must be positive" if values[0] <= 0
            else "they must increase" if any(b <= a for a, b in zip(values, values[1:]))
            else None
        )
        if problem is not None:
            raise ValueError(f"Bad checkpoints {list(values)}: {problem}.")
        object.__setattr__(self, "steps", values)

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[float]:
        return iter(self.steps)

    def __getitem__(self, index: int) -> float:
        return self.steps[index]

    @property
    def final(self) -> float:
        """The final checkpoint."""
        return self.steps[-1]

    def tolist(self) -> list[float]:
        """The steps as a list (e.g. for JSON)."""
        return list(self.steps)

    def rescaled(self, reached: int | None = None) -> Tensor:
        """Ax's [0, 1] rescaling of the first ``reached`` checkpoints (default all),
        as when the largest step in the data is ``self[reached - 1]``: a ``reached``
        tensor."""
        c = torch.tensor(self.steps[: reached or len(self)], dtype=torch.double)
        return (c - c[0]) / (c[-1] - c[0])

    def match(self, steps: Tensor, rescaled: bool = False) -> tuple[Tensor, Tensor]:
        """The nearest checkpoint of every step, and whether the step is that checkpoint.

        Args:
            steps: Steps of any shape: raw, or as Ax rescales them to [0, 1] when
                the data reach the final checkpoint (``rescaled=True``).
            rescaled: Whether ``steps`` are rescaled.

        Returns:
            A long tensor of checkpoint indices and a bool tensor, both shaped as
            ``steps``.
        """
        units = steps.detach().double()
        if not rescaled:
            units = (units - self.steps[0]) / (self.final - self.steps[0])
        return _nearest(units, self.rescaled().to(units.device))

    def rescaled_indices(self, steps: Tensor) -> Tensor:
        """Checkpoint indices of steps that Ax rescaled to [0, 1].

        Ax rescales with the smallest and largest step in the data. Runs report a
        prefix of the checkpoints, so the smallest is the first checkpoint, and
        once a run reached the final checkpoint the steps are
        ``(c_j - c_0) / (c_final - c_0)``.

        Args:
            steps: A tensor of rescaled steps (any shape).

        Returns:
            A long tensor of the same shape with indices in ``0..M-1``.

        Raises:
            ValueError: No run reached the final checkpoint (the steps fit a prefix
                of the checkpoints), or the steps are not the checkpoints.
        """
        index, ok = self.match(steps, rescaled=True)
        if ok.all():
            return index
        for reached in range(len(self) - 1, 1, -1):
            units = steps.detach().double()
            if _nearest(units, self.rescaled(reached).to(units.device))[1].all():
                raise ValueError(
                    f"The learning curves reach checkpoint {self[reached - 1]:g} at most, "
                    f"not the final checkpoint {self.final:g}. GPAR targets the final "
                    "checkpoint and needs at least two runs that reached it."
                )
        bad = sorted({round(float(s), 6) for s in steps[~ok].reshape(-1).tolist()})[:10]
        raise ValueError(
            f"The reported steps do not match the checkpoints {self.tolist()}: after Ax's "
            f"rescaling to [0, 1], steps {bad} are not checkpoints. Declare every step at "
            "which the metric reports, in increasing order."
        )


def _nearest(units: Tensor, grid: Tensor) -> tuple[Tensor, Tensor]:
    """The nearest ``grid`` index of every step in ``units`` (same units as the grid),
    and whether it is within ``STEP_TOLERANCE``."""
    best, index = (units.reshape(-1, 1) - grid).abs().min(-1)
    return index.reshape(units.shape), (best <= STEP_TOLERANCE).reshape(units.shape)
