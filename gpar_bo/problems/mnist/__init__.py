"""The MNIST MLP learning-curve problem (section 5 of Requeima et al., 2019).

* :mod:`gpar_bo.problems.mnist.data`: embedded / IDX MNIST loading with a seeded split.
* :mod:`gpar_bo.problems.mnist.mlp`: the six-hyperparameter MLP objective with an epoch callback.
* :mod:`gpar_bo.problems.mnist.curves`: sampling the grid, resumable generation to CSV, and
  :func:`load_curves` to get ``(X, Y)`` at chosen checkpoint epochs.
"""

from gpar_bo.problems.mnist.curves import (
    DEFAULT_CHECKPOINTS,
    generate_curves,
    load_curves,
    read_curve_rows,
    sample_settings,
)
from gpar_bo.problems.mnist.data import MNISTData, load_mnist, read_idx, write_idx
from gpar_bo.problems.mnist.mlp import (
    GRID,
    HPARAM_NAMES,
    PAPER_GRID,
    MLPHyperparameters,
    TrainResult,
    batch_size_for,
    build_mlp,
    train_mlp,
)

__all__ = [
    "DEFAULT_CHECKPOINTS",
    "GRID",
    "HPARAM_NAMES",
    "PAPER_GRID",
    "MNISTData",
    "MLPHyperparameters",
    "TrainResult",
    "batch_size_for",
    "build_mlp",
    "generate_curves",
    "load_curves",
    "load_mnist",
    "read_curve_rows",
    "read_idx",
    "sample_settings",
    "train_mlp",
    "write_idx",
]
