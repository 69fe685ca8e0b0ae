"""The LCBench-style funnel MLP: seven hyperparameters in, per-epoch validation curves out.

LCBench (Zimmer, Lindauer and Hutter, 2021, "Auto-PyTorch Tabular") trained funnel-shaped
MLPs with SGD and cosine annealing on tabular data sets and recorded every epoch. This
module is a small reimplementation of that setting (our own code, not LCBench's):

* ``num_layers`` hidden layers (1..5), each Linear -> ReLU -> Dropout, then a Linear
  output layer. The widths form a funnel: the first hidden layer has ``max_units`` units
  and the widths fall linearly towards the number of classes, which the output layer
  reaches: hidden layer ``i = 0..L-1`` has ``round(max_units - (max_units - C) * i / L)``
  units. Dropout is shaped the same way, from ``max_dropout`` after the first hidden layer
  linearly towards 0 at the output: ``max_dropout * (1 - i / L)``.
* SGD with ``momentum`` and ``weight_decay`` (on all parameters), cross-entropy loss,
  mini-batches of ``batch_size`` reshuffled every epoch (the last batch may be smaller).
* Cosine annealing of the learning rate over the run's epochs, stepped once per epoch:
  epoch ``e`` (from 1) of ``E`` trains at ``learning_rate * (1 + cos(pi (e-1) / E)) / 2``.
  The schedule depends on ``E``: the first 10 epochs of a 50-epoch run are not a
  10-epoch run.
* PyTorch's default initialisation, no batch normalisation.

A run can diverge (large learning rate and momentum): once a training loss is non-finite
and every validation prediction is non-finite, the weights can never become finite again,
so the remaining epochs are recorded as diverged (error 1.0, loss ``inf``) without training
them. Any validation example whose logits are non-finite counts as misclassified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from gpar_bo.problems.curves_io import EpochCallback, TrainResult
from gpar_bo.problems.funnel_mlp.data import TabularData
from gpar_bo.problems.hyperparameters import Hyperparameters
from gpar_bo.problems.training import minibatch_epoch, record_epochs, seeded_run

__all__ = [
    "HPARAM_NAMES",
    "SEARCH_SPACE",
    "Range",
    "FunnelHyperparameters",
    "funnel_widths",
    "funnel_dropouts",
    "build_funnel_mlp",
    "train",
]


@dataclass(frozen=True)
class Range:
    """A hyperparameter's range: ``[low, high]``, sampled uniformly (in log space if ``log``)."""

    low: float
    high: float
    log: bool = False
    integer: bool = False

    def to_unit(self, value: float) -> float:
        """Map a value of the range to ``[0, 1]`` (through its log if ``log``)."""
        if self.log:
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)


#: The LCBench search space (Zimmer et al., 2021, table of the LCBench configuration
#: space), in the column order used everywhere in this package.
SEARCH_SPACE: dict[str, Range] = {
    "batch_size": Range(16, 512, log=True, integer=True),
    "learning_rate": Range(1e-4, 1e-1, log=True),
    "momentum": Range(0.1, 0.99),
    "weight_decay": Range(1e-5, 1e-1, log=True),
    "num_layers": Range(1, 5, integer=True),
    "max_units": Range(64, 1024, log=True, integer=True),
    "max_dropout": Range(0.0, 1.0),
}

#: The seven hyperparameters, in the column order of ``X`` and of the CSV.
HPARAM_NAMES: tuple[str, ...] = tuple(SEARCH_SPACE)


@dataclass(frozen=True)
class FunnelHyperparameters(Hyperparameters):
    """The seven LCBench hyperparameters (raw values, not logs).

    Attributes:
        batch_size: mini-batch size, an integer in 16..512.
        learning_rate: SGD's initial learning rate, in [1e-4, 1e-1].
        momentum: SGD momentum, in [0.1, 0.99].
        weight_decay: SGD weight decay (L2), in [1e-5, 1e-1].
        num_layers: number of hidden layers, an integer in 1..5.
        max_units: units of the first (widest) hidden layer, an integer in 64..1024.
        max_dropout: dropout after the first hidden layer, in [0, 1].
    """

    batch_size: int
    learning_rate: float
    momentum: float
    weight_decay: float
    num_layers: int
    max_units: int
    max_dropout: float

    def __post_init__(self) -> None:
        for name, _, value in self._numbers():
            r = SEARCH_SPACE[name]
            if not r.low * (1 - 1e-9) - 1e-12 <= value <= r.high * (1 + 1e-9) + 1e-12:
                raise ValueError(
                    f"hyperparameter {name}={value:g} is outside its range [{r.low:g}, {r.high:g}]"
                )
            self._store(name, value, r.integer)

    def to_unit(self) -> list[float]:
        """The setting in the unit cube of :data:`SEARCH_SPACE` (log where the range is)."""
        return [SEARCH_SPACE[name].to_unit(getattr(self, name)) for name in HPARAM_NAMES]


def funnel_widths(num_layers: int, max_units: int, n_classes: int) -> list[int]:
    """Hidden-layer widths: ``max_units`` falling linearly towards ``n_classes`` (the output)."""
    return [
        max(1, int(round(max_units - (max_units - n_classes) * i / num_layers)))
        for i in range(num_layers)
    ]


def funnel_dropouts(num_layers: int, max_dropout: float) -> list[float]:
    """Dropout after each hidden layer: ``max_dropout`` falling linearly towards 0."""
    return [max_dropout * (1.0 - i / num_layers) for i in range(num_layers)]


def build_funnel_mlp(hparams: FunnelHyperparameters, n_features: int, n_classes: int) -> nn.Sequential:
    """The funnel network (PyTorch default initialisation; uses the global torch RNG)."""
    layers: list[nn.Module] = []
    width_in = n_features
    widths = funnel_widths(hparams.num_layers, hparams.max_units, n_classes)
    for width, p in zip(widths, funnel_dropouts(hparams.num_layers, hparams.max_dropout)):
        layers += [nn.Linear(width_in, width), nn.ReLU(), nn.Dropout(p)]
        width_in = width
    layers.append(nn.Linear(width_in, n_classes))
    return nn.Sequential(*layers)


def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float, bool]:
    """(cross-entropy, error rate, all logits non-finite) on ``(x, y)``."""
    model.eval()
    with torch.inference_mode():
        logits = model(x)
        finite = torch.isfinite(logits).all(dim=1)
        wrong = (logits.argmax(dim=1) != y) | ~finite
        loss = float(nn.functional.cross_entropy(logits, y))
    return (loss if math.isfinite(loss) else math.inf), float(wrong.double().mean()), not bool(finite.any())


def train(
    hparams: FunnelHyperparameters,
    data: TabularData,
    epochs: int = 50,
    seed: int = 0,
    callback: EpochCallback | None = None,
) -> TrainResult:
    """Train the funnel MLP and report validation loss and error after every epoch.

    Deterministic for a given ``seed`` on a given machine and thread count; the global
    torch RNG state is left as it was.

    Args:
        hparams: the seven hyperparameters.
        data: a split from :func:`gpar_bo.problems.funnel_mlp.load_dataset`.
        epochs: epochs of the run; the cosine schedule anneals over exactly these.
        seed: seed of the initialisation, batch order and dropout masks.
        callback: called as ``callback(epoch, val_loss, val_error)`` after each epoch
            (epochs count from 1); a truthy return value stops training.

    Returns:
        A :class:`~gpar_bo.problems.curves_io.TrainResult` with one entry per epoch run.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    with seeded_run(seed) as (result, shuffle_gen):
        model = build_funnel_mlp(hparams, data.n_features, data.n_classes)
        optimiser = torch.optim.SGD(
            model.parameters(), lr=hparams.learning_rate, momentum=hparams.momentum,
            weight_decay=hparams.weight_decay,
        )
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=epochs)
        diverged = False
        val_loss, val_error = math.inf, 1.0

        def run_epoch(epoch: int) -> tuple[float, float]:
            nonlocal diverged, val_loss, val_error
            if not diverged:
                finite_training = minibatch_epoch(
                    model, optimiser, data.x_train, data.y_train, hparams.batch_size, shuffle_gen,
                    nn.functional.cross_entropy,
                )
                schedule.step()
                val_loss, val_error, all_nonfinite = _evaluate(model, data.x_val, data.y_val)
                diverged = all_nonfinite and not finite_training
            return val_loss, val_error

        record_epochs(result, epochs, run_epoch, callback)
    return result
