"""The funnel MLP as a tuning problem: its search space and its training job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ax.core.parameter import ParameterType, RangeParameter

from gpar_bo.problems.funnel_mlp.data import DATASETS
from gpar_bo.problems.funnel_mlp.mlp import SEARCH_SPACE
from gpar_bo.tuning.jobs import Report
from gpar_bo.tuning.problem import TuningProblem

__all__ = ["funnel_problem", "search_space_parameters", "train_funnel_mlp"]


def search_space_parameters() -> list[RangeParameter]:
    """:data:`SEARCH_SPACE` as Ax parameters (integers as ``INT``, log ranges on a log scale)."""
    return [
        RangeParameter(
            name,
            ParameterType.INT if r.integer else ParameterType.FLOAT,
            int(r.low) if r.integer else float(r.low),
            int(r.high) if r.integer else float(r.high),
            log_scale=r.log,
        )
        for name, r in SEARCH_SPACE.items()
    ]


def funnel_problem(
    dataset: str = "digits", epochs: int = 50, seed: int = 0, max_examples: int | None = None
) -> TuningProblem:
    """The seven LCBench hyperparameters of :mod:`gpar_bo.problems.funnel_mlp`, on validation error.

    Args:
        dataset: a bundled scikit-learn data set (:data:`DATASETS`).
        epochs: epochs per full trial (the cosine schedule anneals over these).
        seed: base training seed (trial ``i`` uses ``seed + i``).
        max_examples: use only this many examples (smoke tests).
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown data set {dataset!r}; expected one of {sorted(DATASETS)}")
    kwargs: dict[str, Any] = {"dataset": dataset, "epochs": epochs, "seed": seed}
    if max_examples is not None:
        kwargs["max_examples"] = max_examples
    return TuningProblem(
        name=f"funnel_mlp_{dataset}", parameters=search_space_parameters(), metric="val_error",
        epochs=epochs, train="gpar_bo.problems.funnel_mlp.job:train_funnel_mlp",
        train_kwargs=kwargs, tracking_metrics=["val_loss"],
    )


def train_funnel_mlp(
    parameters: Mapping[str, float],
    report: Report,
    trial_index: int,
    dataset: str = "digits",
    epochs: int = 50,
    seed: int = 0,
    threads: int = 1,
    max_examples: int | None = None,
) -> None:
    """Train the funnel MLP of :mod:`gpar_bo.problems.funnel_mlp`, reporting after every epoch.

    Reports ``val_error`` (validation error rate) and ``val_loss`` (validation
    cross-entropy; ``inf`` once diverged) at epochs 1..``epochs``; the run's seed is
    ``seed + trial_index``.
    """
    import torch

    from gpar_bo.problems.funnel_mlp.data import load_dataset
    from gpar_bo.problems.funnel_mlp.mlp import FunnelHyperparameters, train

    torch.set_num_threads(threads)
    data = load_dataset(dataset, max_examples=max_examples)
    hparams = FunnelHyperparameters.from_dict(parameters)
    train(
        hparams, data, epochs=epochs, seed=seed + trial_index,
        callback=lambda epoch, loss, error: report(epoch, {"val_error": error, "val_loss": loss}),
    )
