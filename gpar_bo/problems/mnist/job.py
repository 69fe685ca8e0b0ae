"""The MNIST MLP as a tuning problem: its search space and its training job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpar_bo.problems.mnist.mlp import GRID
from gpar_bo.tuning.jobs import Report

if TYPE_CHECKING:
    from gpar_bo.tuning.problem import TuningProblem

__all__ = ["MIN_TRAIN_EXAMPLES", "MIN_VAL_EXAMPLES", "TUNING_CHECKPOINTS", "check_mnist_job",
           "mnist_problem", "train_mnist_mlp", "tuning_checkpoints"]

#: The smallest split a tuning run accepts: below it the validation error is too
#: coarse to rank configurations (5 digits give 1 validation digit: error 0 or 1).
MIN_VAL_EXAMPLES = 10
MIN_TRAIN_EXAMPLES = 50

#: The checkpoints of a 21-epoch run at which the freeze-thaw and BO benchmarks decide
#: (``benchmarks.bo.problems``' MNIST table); roughly doubling, as the rungs of
#: successive halving. ``gpar-bo tune`` decides at the same ones by default, so that what
#: it runs is what those benchmarks measured.
TUNING_CHECKPOINTS: tuple[int, ...] = (1, 3, 7, 14, 21)


def tuning_checkpoints(epochs: int) -> list[int]:
    """:data:`TUNING_CHECKPOINTS` scaled to ``epochs``-epoch runs (the same fractions of
    the run, rounded, at least epoch 1): ``[1, 3, 7, 14, 21]`` for 21, ``[1, 3, 7, 10]``
    for 10."""
    last = TUNING_CHECKPOINTS[-1]
    return sorted({max(1, round(epochs * c / last)) for c in TUNING_CHECKPOINTS})


def mnist_problem(
    epochs: int = 10, data_dir: str | None = None, seed: int = 0, max_examples: int | None = None,
    checkpoints: Sequence[int] | None = None,
) -> TuningProblem:
    """The six MLP hyperparameters of :mod:`gpar_bo.problems.mnist` (paper ranges), on validation error.

    Args:
        epochs: Epochs per full trial.
        data_dir: An MNIST IDX directory; None for the embedded 5k digits.
        seed: Base training seed (trial i uses ``seed + i``).
        max_examples: Use only this many digits (smoke tests).
        checkpoints: The epochs at which runs are recorded, paused or stopped (checked
            by ``tune``); None: :func:`tuning_checkpoints` of ``epochs``.
    """
    # Imported here: training workers import this module for its job, not Ax.
    from ax.core.parameter import ParameterType, RangeParameter

    from gpar_bo.tuning.problem import TuningProblem


    def bounds(name: str) -> tuple[float, float]:
        return float(min(GRID[name])), float(max(GRID[name]))

    integer = ParameterType.INT
    parameters = [
        RangeParameter("n_hidden_layers", integer, *bounds("n_hidden_layers")),
        RangeParameter("n_neurons", integer, *bounds("n_neurons")),
        RangeParameter("dropout", ParameterType.FLOAT, *bounds("dropout")),
        RangeParameter("log_learning_rate", ParameterType.FLOAT, *bounds("log_learning_rate")),
        RangeParameter("log_l1", ParameterType.FLOAT, *bounds("log_l1")),
        RangeParameter("log_l2", ParameterType.FLOAT, *bounds("log_l2")),
    ]
    kwargs: dict[str, Any] = {"epochs": epochs, "data_dir": data_dir, "seed": seed}
    if max_examples is not None:
        kwargs["max_examples"] = max_examples
    return TuningProblem(
        name="mnist_mlp", parameters=parameters, metric="val_error", epochs=epochs,
        train="gpar_bo.problems.mnist.job:train_mnist_mlp", train_kwargs=kwargs,
        tracking_metrics=["val_loss"], check="gpar_bo.problems.mnist.job:check_mnist_job",
        checkpoint_epochs=tuning_checkpoints(epochs) if checkpoints is None else list(checkpoints),
    )


def check_mnist_job(
    epochs: int = 21,
    data_dir: str | None = None,
    seed: int = 0,
    threads: int = 1,
    max_examples: int | None = None,
) -> None:
    """Check :func:`train_mnist_mlp`'s settings in the tuning process, before any trial.

    Loads the data as the jobs will (so a missing directory or a malformed IDX file is
    found here, in seconds) and checks that the train/validation split is big enough.

    Raises:
        ValueError: One line naming the bad setting.
    """
    from gpar_bo.problems.mnist.data import load_mnist

    if epochs < 1:
        raise ValueError(f"epochs must be >= 1 (got {epochs})")
    if threads < 1:
        raise ValueError(f"threads must be >= 1 (got {threads})")
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"max_examples (--max-examples) must be >= 1 (got {max_examples})")
    try:
        data = load_mnist(data_dir, max_examples=max_examples)
    except ValueError as error:
        # load_mnist's own limit (2 examples) is below ours: say ours.
        if max_examples is None or "max_examples" not in str(error):
            raise
        data = None
    if data is None or data.n_val < MIN_VAL_EXAMPLES or data.n_train < MIN_TRAIN_EXAMPLES:
        split = ("" if data is None else
                 f" ({data.n_train} training and {data.n_val} validation digits)")
        what = (f"max_examples (--max-examples) {max_examples} is too small"
                if max_examples is not None else f"the MNIST data in {data_dir} is too small")
        raise ValueError(
            f"{what}{split}; a tuning run needs at least {MIN_TRAIN_EXAMPLES} training and "
            f"{MIN_VAL_EXAMPLES} validation digits (60 examples or more)"
        )


def train_mnist_mlp(
    parameters: Mapping[str, float],
    report: Report,
    trial_index: int,
    epochs: int = 21,
    data_dir: str | None = None,
    seed: int = 0,
    threads: int = 1,
    max_examples: int | None = None,
    checkpoint_dir: str | None = None,
) -> None:
    """Train the MNIST MLP of :mod:`gpar_bo.problems.mnist`, reporting after every epoch.

    Reports ``val_error`` (validation error rate) and ``val_loss`` (validation
    cross-entropy) at epochs 1..``epochs``; the run's seed is ``seed + trial_index``.
    ``data_dir`` is an IDX directory (default: embedded 5k MNIST); ``max_examples``
    keeps a subset (for smoke tests). Resumable: with a ``checkpoint_dir`` the run's
    state is saved there before every report and a run that finds one goes on from it
    (:func:`gpar_bo.problems.mnist.mlp.train_mlp`).
    """
    import torch

    from gpar_bo.problems.mnist.data import load_mnist
    from gpar_bo.problems.mnist.mlp import MLPHyperparameters, train_mlp

    torch.set_num_threads(threads)
    data = load_mnist(data_dir, max_examples=max_examples)
    hparams = MLPHyperparameters.from_dict(parameters)
    train_mlp(
        hparams, data, epochs=epochs, seed=seed + trial_index, checkpoint_dir=checkpoint_dir,
        callback=lambda epoch, loss, error: report(epoch, {"val_error": error, "val_loss": loss}),
    )
