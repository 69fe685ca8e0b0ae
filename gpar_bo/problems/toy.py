"""A toy tuning problem: fast synthetic learning curves on [0, 1]^2 (tests, demos)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpar_bo.tuning.jobs import Report

if TYPE_CHECKING:
    from gpar_bo.tuning.problem import TuningProblem

__all__ = ["toy_problem", "train_toy_curves"]


def toy_problem(epochs: int = 8, seconds_per_epoch: float = 0.0) -> TuningProblem:
    """Synthetic learning curves on [0, 1]^2 (:func:`train_toy_curves`)."""
    # Imported here: training workers import this module for its job, not Ax.
    from ax.core.parameter import ParameterType, RangeParameter

    from gpar_bo.tuning.problem import TuningProblem

    return TuningProblem(
        name="toy_curves",
        parameters=[RangeParameter(n, ParameterType.FLOAT, 0.0, 1.0) for n in ("x1", "x2")],
        metric="error", epochs=epochs, train="gpar_bo.problems.toy:train_toy_curves",
        train_kwargs={"epochs": epochs, "seconds_per_epoch": seconds_per_epoch},
    )


def train_toy_curves(
    parameters: Mapping[str, float],
    report: Report,
    trial_index: int,
    epochs: int = 16,
    noise_std: float = 0.005,
    seconds_per_epoch: float = 0.0,
    metric_name: str = "error",
    checkpoint_dir: str | None = None,
) -> None:
    """A fast synthetic training run: :func:`gpar_bo.synthetic.learning_curves`.

    Parameters ``x1`` and ``x2`` in [0, 1]; reports ``metric_name`` at epochs
    1..``epochs``, sleeping ``seconds_per_epoch`` per epoch to mimic training.
    Resumable: with a ``checkpoint_dir`` it saves the epoch reached before each
    report and, when started again, goes on from the next epoch. (Its whole curve,
    noise included, is a function of the parameters and ``trial_index``, so the
    epoch is all the state there is.)
    """
    import time

    import torch

    from gpar_bo.synthetic import learning_curves
    from gpar_bo.tuning.jobs import load_checkpoint, save_checkpoint

    X = torch.tensor([[parameters["x1"], parameters["x2"]]], dtype=torch.double)
    curve = learning_curves(X, range(1, epochs + 1), noise_std, seed=trial_index)[0]
    state = load_checkpoint(checkpoint_dir) or {"epoch": 0}
    for epoch in range(state["epoch"] + 1, epochs + 1):
        time.sleep(seconds_per_epoch)
        if checkpoint_dir is not None:
            save_checkpoint(checkpoint_dir, {"epoch": epoch})
        if report(epoch, {metric_name: float(curve[epoch - 1])}):
            return
