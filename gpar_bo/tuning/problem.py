"""What ``gpar-bo tune`` tunes: :class:`TuningProblem`.

Its own module so that everything of the tuning application (the checks, both loops,
their shared session) can name it without importing the loop that runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ax.core.parameter import Parameter

from gpar_bo.ax.checkpoints import Checkpoints

__all__ = ["TuningProblem"]


@dataclass
class TuningProblem:
    """What to tune: parameters, the training job and its learning-curve metric.

    Attributes:
        name: The experiment name.
        parameters: Ax parameters of the search space (range parameters; the
            freeze-thaw scheduler also takes choice and fixed ones).
        metric: The objective metric reported every epoch (minimised).
        epochs: Epochs per full trial.
        train: The training function, ``"module:function"`` (:mod:`gpar_bo.tuning.jobs`).
        train_kwargs: Its keyword arguments (JSON-serialisable).
        tracking_metrics: Further values the job reports, recorded but not optimised.
        check: ``"module:function"`` called as ``check(**train_kwargs)`` in the tuning
            process before anything starts; raises ``ValueError`` (one line) if the
            job could not work, e.g. its data is missing or too small.
        budget: The default epoch budget of :func:`tune` (e.g. a space file's).
        checkpoint_epochs: The epochs at which the tuner records the metric, GPAR
            models it, and runs may be paused or stopped, increasing and ending at
            ``epochs`` (e.g. ``[1, 3, 7, 14, 21]``); the job's reports at other epochs
            are not recorded. None: every epoch 1..epochs.
    """

    name: str
    parameters: list[Parameter]
    metric: str
    epochs: int
    train: str
    train_kwargs: dict[str, Any] = field(default_factory=dict)
    tracking_metrics: list[str] = field(default_factory=list)
    check: str | None = None
    budget: int | None = None
    checkpoint_epochs: Sequence[int] | None = None

    @property
    def checkpoints(self) -> Checkpoints:
        """``checkpoint_epochs``, by default epochs 1..epochs."""
        if self.checkpoint_epochs is None:
            return Checkpoints(range(1, self.epochs + 1))
        return Checkpoints(self.checkpoint_epochs)
