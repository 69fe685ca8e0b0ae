"""Tabular problems for the BO benchmark: the MNIST MLP table, the funnel-MLP tables
and a synthetic family.

Each returns a ``TabularProblem`` with settings in the unit cube and full
validation error and loss curves (21 epochs; 50 for the funnel-MLP tables).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from benchmarks.bo.harness import TabularProblem
from gpar_bo.measurement import BinomialNoise, GaussianNoise
from gpar_bo.problems import funnel_mlp
from gpar_bo.problems.mnist import HPARAM_NAMES
from gpar_bo.problems.mnist.curves import load_curves
from gpar_bo.problems.mnist.job import TUNING_CHECKPOINTS

DATA = Path(__file__).resolve().parents[1] / "data"
MNIST_CSV = DATA / "mnist_curves_tabular.csv"
#: The 291-setting MNIST MLP study set: development data (the calibration diagnosis and
#: the freeze-thaw policy's changes are judged on it before the reported tables).
MNIST_STUDY_CSV = DATA / "mnist_curves_study.csv"
EPOCHS = 21
DEFAULT_CHECKPOINTS = TUNING_CHECKPOINTS  # what gpar-bo tune decides at on MNIST
#: The funnel-MLP tables: data set -> CSV (made by ``gpar-bo generate-funnel-curves``).
FUNNEL_CSV = {name: DATA / f"{name}_funnel_curves.csv" for name in ("digits", "breast_cancer")}
#: Development funnel tables, never reported as results: the funnel MLPs on
#: ``make_classification``'s seeded synthetic task (real training curves; the policy's
#: changes aimed at the funnel tables are judged on it first).
DEV_FUNNEL_CSV = {"classification": DATA / "classification_funnel_curves.csv"}
FUNNEL_EPOCHS = 50
#: Default reporting epochs of the funnel tables: roughly doubling, as for MNIST.
FUNNEL_CHECKPOINTS = (1, 3, 6, 12, 25, 50)


def grid_bounds(metadata: dict) -> tuple[Tensor, Tensor]:
    """Lower and upper bounds (``d`` each) of the sampling grid, in ``HPARAM_NAMES`` order.

    The grid, not the sampled data, defines the cube, so a setting's unit-cube
    coordinates do not depend on which settings happened to be sampled.
    """
    grid = metadata["grid"]
    if list(grid) != list(HPARAM_NAMES):
        raise ValueError(f"grid parameters {list(grid)} differ from HPARAM_NAMES {HPARAM_NAMES}.")
    lower = torch.tensor([min(v) for v in grid.values()], dtype=torch.double)
    upper = torch.tensor([max(v) for v in grid.values()], dtype=torch.double)
    return lower, upper


def mnist_table(
    checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS, path: Path = MNIST_CSV
) -> TabularProblem:
    """The committed table of 2,000 MNIST MLP settings with 21-epoch curves.

    Args:
        checkpoints: Epochs at which runs report (increasing, last == 21).
        path: The CSV; its metadata is the ``.json`` file next to it.

    Returns:
        A problem with ``X``: ``2000 x 6`` in the unit cube (grid bounds),
        ``error`` and ``loss``: ``2000 x 21``.
    """
    metadata = json.loads(Path(path).with_suffix(".json").read_text())
    X, error = load_curves(path, epochs=range(1, EPOCHS + 1), metric="error")
    _, loss = load_curves(path, epochs=range(1, EPOCHS + 1), metric="loss")
    lower, upper = grid_bounds(metadata)
    X = (X - lower) / (upper - lower)
    return TabularProblem("mnist", X, error, loss, tuple(checkpoints), binomial_noise(metadata))


def funnel_table(
    dataset: str = "digits",
    checkpoints: Sequence[int] = FUNNEL_CHECKPOINTS,
    path: Path | None = None,
) -> TabularProblem:
    """A committed table of LCBench-style funnel-MLP settings with 50-epoch curves.

    ``X`` is the raw setting mapped into the unit cube by the search space's ranges
    (:func:`gpar_bo.problems.funnel_mlp.to_unit_cube`: log scale for batch size,
    learning rate, weight decay and maximum units), so coordinates do not depend on
    which settings were sampled. A diverged run's loss is ``inf`` (its error is 1.0).

    Args:
        dataset: Key of :data:`FUNNEL_CSV` or :data:`DEV_FUNNEL_CSV` (used for the
            default path and the name).
        checkpoints: Epochs at which runs report (increasing, last == 50).
        path: The CSV, if not the default one for ``dataset``.

    Returns:
        A problem named ``funnel_<dataset>`` with ``X``: ``n x 7`` and ``error`` and
        ``loss``: ``n x 50``, ``n`` the rows in the file.
    """
    if path is None:
        known = {**FUNNEL_CSV, **DEV_FUNNEL_CSV}
        if dataset not in known:
            raise ValueError(f"no funnel table for {dataset!r}; known: {sorted(known)}")
        path = known[dataset]
    epochs = range(1, FUNNEL_EPOCHS + 1)
    X, error = funnel_mlp.load_curves(path, epochs=epochs, metric="error")
    _, loss = funnel_mlp.load_curves(path, epochs=epochs, metric="loss")
    metadata_path = Path(path).with_suffix(".json")
    metadata = json.loads(metadata_path.read_text()) if metadata_path.exists() else {}
    return TabularProblem(
        f"funnel_{dataset}", funnel_mlp.to_unit_cube(X), error, loss, tuple(checkpoints),
        binomial_noise(metadata),
    )


def binomial_noise(metadata: dict) -> BinomialNoise | None:
    """The errors' sampling noise on the table's validation set (its ``n_val``), if recorded."""
    return BinomialNoise(int(metadata["n_val"])) if "n_val" in metadata else None


def synthetic_curves(X: Tensor, epochs: int, optimum: Tensor) -> Tensor:
    """Noise-free power-law error curves whose shape depends on ``x``.

    The final error (plateau) grows with the squared distance to ``optimum``;
    the speed grows with ``x_0`` and the starting error falls with ``x_1``, so
    settings far from the optimum can start fast and low yet plateau high and
    the curves cross.

    Args:
        X: ``n x d`` settings in the unit cube (``d >= 2``).
        epochs: Number of epochs ``E``.
        optimum: ``d`` location of the lowest plateau.

    Returns:
        ``n x E`` errors in (0, 1).
    """
    t = torch.arange(1, epochs + 1, dtype=X.dtype)
    plateau = 0.02 + 0.6 * ((X - optimum) ** 2).mean(-1, keepdim=True)
    speed = 0.3 + 2.0 * X[:, :1]
    start = 0.9 - 0.4 * X[:, 1:2]
    return plateau + (start - plateau) * t ** (-speed)


def synthetic_problem(
    n: int = 1000,
    d: int = 4,
    seed: int = 0,
    checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS,
    noise_std: float = 0.005,
) -> TabularProblem:
    """A synthetic learning-curve table for fast checks (deterministic given ``seed``).

    Settings are uniform in the unit cube; the optimum is drawn from the
    middle of the cube. Error: ``synthetic_curves`` plus Gaussian noise,
    clipped to [0, 1]. Loss: ``-log(1 - 0.9 * error)`` (monotone in the
    error, like cross-entropy) plus its own noise.

    Args:
        n: Number of settings.
        d: Dimension (>= 2).
        seed: Seed for the settings, the optimum and the noise.
        checkpoints: Epochs at which runs report (last == 21).
        noise_std: Noise standard deviation of error and loss.

    Returns:
        A problem with ``X``: ``n x d``, ``error`` and ``loss``: ``n x 21``, and
        the noise-free final errors ``true_final_error``.
    """
    if n < 1 or d < 2:
        raise ValueError(f"need n >= 1 and d >= 2, got n={n}, d={d}.")
    generator = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=generator, dtype=torch.double)
    optimum = 0.25 + 0.5 * torch.rand(d, generator=generator, dtype=torch.double)
    clean = synthetic_curves(X, EPOCHS, optimum)
    noise = torch.randn(2, n, EPOCHS, generator=generator, dtype=torch.double) * noise_std
    error = (clean + noise[0]).clamp(0.0, 1.0)
    loss = -torch.log1p(-0.9 * clean) + noise[1]
    return TabularProblem("synthetic", X, error, loss, tuple(checkpoints), GaussianNoise(noise_std),
                          true_final_error=clean[:, -1].clone())
