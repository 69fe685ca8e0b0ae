"""The MNIST MLP objective: six hyperparameters in, per-epoch validation curves out.

This is the problem of section 5 ("MLP validation error") of Requeima et al. (2019): a
fully connected ReLU network with dropout, trained with Adam on cross-entropy plus L1 and
L2 weight penalties, scored after every epoch on a held-out validation set. The same
:func:`train_mlp` produces the committed learning-curve data and serves as the live
objective of the Ax tuning loop, where the callback lets a caller stop a run early.

Scale follows the authors' setup: learning rate and penalties are on a natural-log scale,
and the batch size is set so that one epoch is 12.5 optimiser steps (their 50,000
training examples in batches of 4,000).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpar_bo.problems.curves_io import EpochCallback, TrainResult
from gpar_bo.problems.hyperparameters import Hyperparameters
from gpar_bo.problems.mnist.data import MNISTData
from gpar_bo.problems.training import minibatch_epoch, record_epochs, seeded_run
from gpar_bo.tuning.jobs import load_checkpoint, save_checkpoint

__all__ = [
    "HPARAM_NAMES",
    "GRID",
    "PAPER_GRID",
    "MLPHyperparameters",
    "TrainResult",
    "EpochCallback",
    "STEPS_PER_EPOCH",
    "batch_size_for",
    "build_mlp",
    "train_mlp",
]

#: Optimiser steps per epoch in the authors' setting (50,000 examples / batch 4,000).
STEPS_PER_EPOCH = 12.5


def _grid(start: float, stop: float, step: float) -> tuple[float, ...]:
    """Inclusive arithmetic grid, rounded so that 0.1-steps compare exactly."""
    n = int(round((stop - start) / step)) + 1
    return tuple(round(start + i * step, 10) for i in range(n))


#: Every value the objective accepts on the grid. Layers 1-3 are available (the
#: authors sampled 1-2); the log learning rate is restricted to > -10 as in the paper.
GRID: dict[str, tuple[float, ...]] = {
    "n_hidden_layers": (1, 2, 3),
    "n_neurons": tuple(range(50, 451, 50)),
    "dropout": _grid(0.0, 0.8, 0.1),
    "log_learning_rate": _grid(-9.0, -1.0, 1.0),
    "log_l1": _grid(-20.0, -1.0, 1.0),
    "log_l2": _grid(-20.0, -1.0, 1.0),
}

#: The authors' sampling grid: as :data:`GRID` but with 1-2 hidden layers only.
#: 2 * 9 * 9 * 9 * 20 * 20 = 583,200 settings.
PAPER_GRID: dict[str, tuple[float, ...]] = {**GRID, "n_hidden_layers": (1, 2)}

#: The six hyperparameters, in the column order of ``X`` everywhere in this package.
HPARAM_NAMES: tuple[str, ...] = tuple(GRID)


@dataclass(frozen=True)
class MLPHyperparameters(Hyperparameters):
    """The paper's six MLP hyperparameters (logs are natural logs).

    Values must lie within the bounds of :data:`GRID`; off-grid values inside the bounds
    are allowed (a continuous optimiser may propose them) unless ``require_on_grid`` is
    used in :meth:`from_dict`, and :attr:`on_grid` tells which case holds.

    Attributes:
        n_hidden_layers: number of hidden layers, an integer in 1..3.
        n_neurons: neurons per hidden layer, an integer in 50..450.
        dropout: dropout probability after each hidden layer, in [0, 0.8].
        log_learning_rate: log of Adam's learning rate, in [-9, -1].
        log_l1: log of the L1 penalty weight on hidden-layer weights, in [-20, -1].
        log_l2: log of the L2 penalty weight on hidden-layer weights, in [-20, -1].
    """

    n_hidden_layers: int
    n_neurons: int
    dropout: float
    log_learning_rate: float
    log_l1: float
    log_l2: float

    def __post_init__(self) -> None:
        for name, given, value in self._numbers():
            lo, hi = min(GRID[name]), max(GRID[name])
            if not lo - 1e-9 <= value <= hi + 1e-9:
                raise ValueError(f"hyperparameter {name}={given} is outside its range [{lo}, {hi}]")
            self._store(name, value, integer=name in ("n_hidden_layers", "n_neurons"))

    @classmethod
    def from_dict(
        cls, values: Mapping[str, Any], *, require_on_grid: bool = False
    ) -> MLPHyperparameters:
        """Build from a name -> value mapping, rejecting unknown or missing names.

        Raises:
            ValueError: an unknown or missing hyperparameter name, a value out of range,
                or (with ``require_on_grid``) a value that is not a grid point.
        """
        hp = super().from_dict(values)
        if require_on_grid:
            hp.check_on_grid()
        return hp

    def off_grid(self, grid: Mapping[str, tuple[float, ...]] = GRID) -> list[str]:
        """Names of the hyperparameters whose value is not a point of ``grid``."""
        return [
            name
            for name in HPARAM_NAMES
            if not any(abs(getattr(self, name) - g) < 1e-9 for g in grid[name])
        ]

    @property
    def on_grid(self) -> bool:
        return not self.off_grid()

    def check_on_grid(self, grid: Mapping[str, tuple[float, ...]] = GRID) -> None:
        """Raise ``ValueError`` naming every hyperparameter that is off ``grid``."""
        bad = self.off_grid(grid)
        if bad:
            detail = "; ".join(f"{n}={getattr(self, n)} not in {list(grid[n])}" for n in bad)
            raise ValueError(f"hyperparameter value off the grid: {detail}")

    @property
    def learning_rate(self) -> float:
        return math.exp(self.log_learning_rate)

    @property
    def l1(self) -> float:
        return math.exp(self.log_l1)

    @property
    def l2(self) -> float:
        return math.exp(self.log_l2)


def batch_size_for(n_train: int, steps_per_epoch: float = STEPS_PER_EPOCH) -> int:
    """Batch size giving about ``steps_per_epoch`` optimiser steps per epoch.

    ``batch_size_for(50_000) == 4000`` (the authors' setting); the embedded 5k split
    (4,167 training digits) gives 333.
    """
    return max(1, int(round(n_train / steps_per_epoch)))


def build_mlp(hparams: MLPHyperparameters, n_features: int = 784, n_classes: int = 10) -> nn.Sequential:
    """The network: ``n_hidden_layers`` x (Linear -> ReLU -> Dropout), then Linear to logits.

    Weights are Glorot-uniform and biases zero, the initialisation of the authors' Keras
    code. Uses the global torch RNG (call under a seed).
    """
    layers: list[nn.Module] = []
    width_in = n_features
    for _ in range(hparams.n_hidden_layers):
        layers += [nn.Linear(width_in, hparams.n_neurons), nn.ReLU(), nn.Dropout(hparams.dropout)]
        width_in = hparams.n_neurons
    layers.append(nn.Linear(width_in, n_classes))
    model = nn.Sequential(*layers)
    for module in model:
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)
    return model


def _penalised_weights(model: nn.Sequential) -> list[torch.Tensor]:
    # As in the authors' code, the L1/L2 penalties act on hidden-layer weight matrices
    # only: not on biases and not on the output layer.
    linears = [m for m in model if isinstance(m, nn.Linear)]
    return [m.weight for m in linears[:-1]]


def train_mlp(
    hparams: MLPHyperparameters,
    data: MNISTData,
    epochs: int = 21,
    seed: int = 0,
    callback: EpochCallback | None = None,
    batch_size: int | None = None,
    checkpoint_dir: str | Path | None = None,
) -> TrainResult:
    """Train the MLP with Adam and report validation loss and error after every epoch.

    Deterministic for a given ``seed`` (initialisation, batch order and dropout masks
    all come from it) on a given machine and thread count; the global torch RNG state is
    left as it was.

    Args:
        hparams: the six hyperparameters.
        data: train/validation split from :func:`gpar_bo.problems.mnist.load_mnist`; inputs
            ``(n, d)`` float32, labels ``(n,)`` int64.
        epochs: maximum number of epochs (the paper's curves have 21 checkpoints).
        seed: random seed of this run.
        callback: called as ``callback(epoch, val_loss, val_error)`` after each epoch
            (epochs count from 1); a truthy return value stops training.
        batch_size: override the default :func:`batch_size_for` ``(data.n_train)``.
        checkpoint_dir: if given, the run's whole state (weights, Adam's state, the
            dropout and shuffling RNG states, the epoch and the curve so far) is saved
            there after every epoch, before ``callback`` is called, and a run started
            with a saved state goes on from the next epoch: stopping it in the
            callback and starting it again gives the same curve as never stopping.
            (The optimiser has no learning-rate schedule, so there is no scheduler
            state to save.)

    Returns:
        A :class:`TrainResult` with one entry per epoch trained, those of earlier runs
        from the checkpoint included.

    Raises:
        ValueError: bad ``epochs`` or ``batch_size``, or a checkpoint saved by a run
            with other hyperparameters, seed or batch size.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    bs = batch_size_for(data.n_train) if batch_size is None else int(batch_size)
    if bs < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    with seeded_run(seed) as (result, shuffle_gen):
        model = build_mlp(hparams, data.n_features, data.n_classes)
        optimiser = torch.optim.Adam(
            model.parameters(), lr=hparams.learning_rate, betas=(0.9, 0.999), eps=1e-8
        )
        penalised = _penalised_weights(model)
        l1, l2 = hparams.l1, hparams.l2

        def objective(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            loss = nn.functional.cross_entropy(logits, labels)
            return loss + sum(l1 * w.abs().sum() + l2 * w.pow(2).sum() for w in penalised)

        def run_epoch(epoch: int) -> tuple[float, float]:
            minibatch_epoch(model, optimiser, data.x_train, data.y_train, bs, shuffle_gen, objective)
            model.eval()
            with torch.inference_mode():
                val_logits = model(data.x_val)
                val_loss = float(nn.functional.cross_entropy(val_logits, data.y_val))
                val_error = float((val_logits.argmax(dim=1) != data.y_val).double().mean())
            return val_loss, val_error

        identity = {"hparams": hparams.to_dict(), "seed": seed, "batch_size": bs}
        state = load_checkpoint(checkpoint_dir)
        if state is not None:
            saved = {key: state.get(key) for key in identity}
            if saved != identity:
                raise ValueError(f"the checkpoint in {checkpoint_dir} is of another run "
                                 f"({saved}), not of this one ({identity})")
            model.load_state_dict(state["model"])
            optimiser.load_state_dict(state["optimiser"])
            torch.set_rng_state(state["torch_rng"])
            shuffle_gen.set_state(state["shuffle_rng"])
            result.val_loss, result.val_error = list(state["val_loss"]), list(state["val_error"])
            result.epochs_run = int(state["epoch"])

        def save(epoch: int) -> None:
            save_checkpoint(checkpoint_dir, {
                **identity, "epoch": epoch, "model": model.state_dict(),
                "optimiser": optimiser.state_dict(), "torch_rng": torch.get_rng_state(),
                "shuffle_rng": shuffle_gen.get_state(), "val_loss": result.val_loss,
                "val_error": result.val_error})

        record_epochs(result, epochs, run_epoch, callback,
                      after_epoch=None if checkpoint_dir is None else save)
    return result
