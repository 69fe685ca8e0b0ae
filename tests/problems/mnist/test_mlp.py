"""The MLP objective: hyperparameter validation, determinism, early stopping."""

from __future__ import annotations

import pytest
import torch

from gpar_bo.problems.mnist import GRID, MLPHyperparameters, batch_size_for, build_mlp, load_mnist, train_mlp
from gpar_bo.problems.mnist.data import MNISTData

SMALL = dict(n_hidden_layers=1, n_neurons=50, dropout=0.2, log_learning_rate=-5.0, log_l1=-12.0, log_l2=-10.0)


@pytest.fixture(scope="module")
def small_data() -> MNISTData:
    return load_mnist(max_examples=600)


def test_grid_matches_the_paper() -> None:
    assert GRID["n_neurons"] == tuple(range(50, 451, 50))
    assert GRID["n_hidden_layers"] == (1, 2, 3)
    assert GRID["dropout"] == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    assert GRID["log_learning_rate"] == tuple(float(v) for v in range(-9, 0))
    assert GRID["log_l1"] == GRID["log_l2"] == tuple(float(v) for v in range(-20, 0))
    assert batch_size_for(50_000) == 4000 and batch_size_for(4167) == 333


def test_hyperparameters_validation() -> None:
    hp = MLPHyperparameters.from_dict(SMALL, require_on_grid=True)
    assert hp.to_vector() == [1.0, 50.0, 0.2, -5.0, -12.0, -10.0]
    assert MLPHyperparameters.from_vector(hp.to_vector()) == hp
    assert hp.on_grid and isinstance(hp.n_neurons, int)
    with pytest.raises(ValueError, match=r"unknown hyperparameter\(s\) \['momentum'\]"):
        MLPHyperparameters.from_dict({**SMALL, "momentum": 0.9})
    with pytest.raises(ValueError, match="missing"):
        MLPHyperparameters.from_dict({k: v for k, v in SMALL.items() if k != "log_l1"})
    with pytest.raises(ValueError, match="log_learning_rate=-12.0 is outside"):
        MLPHyperparameters.from_dict({**SMALL, "log_learning_rate": -12.0})
    with pytest.raises(ValueError, match="n_neurons must be an integer"):
        MLPHyperparameters.from_dict({**SMALL, "n_neurons": 75.5})
    off = MLPHyperparameters.from_dict({**SMALL, "dropout": 0.25})  # in range: allowed
    assert not off.on_grid and off.off_grid() == ["dropout"]
    with pytest.raises(ValueError, match="off the grid: dropout=0.25"):
        MLPHyperparameters.from_dict({**SMALL, "dropout": 0.25}, require_on_grid=True)


def test_architecture() -> None:
    hp = MLPHyperparameters.from_dict({**SMALL, "n_hidden_layers": 3, "n_neurons": 100})
    model = build_mlp(hp)
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 100), (100, 100), (100, 100), (100, 10)]
    assert sum(isinstance(m, torch.nn.Dropout) for m in model) == 3


def test_training_is_deterministic_under_a_seed(small_data: MNISTData) -> None:
    hp = MLPHyperparameters(**SMALL)
    torch.manual_seed(123)
    before = torch.rand(1)
    a = train_mlp(hp, small_data, epochs=2, seed=7)
    b = train_mlp(hp, small_data, epochs=2, seed=7)
    c = train_mlp(hp, small_data, epochs=2, seed=8)
    assert a.val_loss == b.val_loss and a.val_error == b.val_error
    assert a.val_loss != c.val_loss
    assert len(a.val_loss) == len(a.val_error) == a.epochs_run == 2 and not a.stopped_early
    assert all(0.0 <= e <= 1.0 for e in a.val_error)
    # Training draws from its own forked RNG: the caller's stream is untouched.
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before)


def test_training_learns(small_data: MNISTData) -> None:
    hp = MLPHyperparameters.from_dict({**SMALL, "log_learning_rate": -4.0, "dropout": 0.0})
    result = train_mlp(hp, small_data, epochs=2, seed=0)
    assert result.val_error[-1] < 0.6  # chance is 0.9
    assert result.val_loss[-1] < result.val_loss[0] or result.val_loss[0] < 1.5


def test_callback_stops_early(small_data: MNISTData) -> None:
    hp = MLPHyperparameters(**SMALL)
    calls: list[tuple[int, float, float]] = []

    def stop_after_first(epoch: int, loss: float, error: float) -> bool:
        calls.append((epoch, loss, error))
        return epoch >= 1

    result = train_mlp(hp, small_data, epochs=5, seed=0, callback=stop_after_first)
    assert [c[0] for c in calls] == [1]
    assert result.epochs_run == 1 and result.stopped_early
    assert result.val_loss == [calls[0][1]] and result.val_error == [calls[0][2]]
    # A callback that never stops sees every epoch.
    seen: list[int] = []
    full = train_mlp(hp, small_data, epochs=2, seed=0, callback=lambda e, l, r: seen.append(e))
    assert seen == [1, 2] and not full.stopped_early
    assert full.val_loss[0] == result.val_loss[0]  # same seed, same first epoch
