"""The funnel MLP: data split, search space, network shape and training."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from gpar_bo.problems.funnel_mlp import (
    HPARAM_NAMES,
    SEARCH_SPACE,
    FunnelHyperparameters,
    TabularData,
    build_funnel_mlp,
    funnel_dropouts,
    funnel_widths,
    load_dataset,
    sample_setting,
    sample_settings,
    to_unit_cube,
    train,
)

SMALL = FunnelHyperparameters(batch_size=32, learning_rate=0.05, momentum=0.9, weight_decay=1e-4,
                              num_layers=2, max_units=64, max_dropout=0.2)


@pytest.fixture(scope="module")
def small_data() -> TabularData:
    return load_dataset("digits", max_examples=200)


def test_load_dataset_is_seeded_stratified_and_standardised() -> None:
    data = load_dataset("digits")
    assert (data.n_train, data.n_val, data.n_features, data.n_classes) == (1198, 599, 64, 10)
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    # Stratified: each class is a third of its members in the validation set (+-1).
    for label in range(10):
        n_val, n_train = int((data.y_val == label).sum()), int((data.y_train == label).sum())
        assert abs(n_val - (n_val + n_train) / 3) <= 1
    assert data.x_train.mean(0).abs().max() < 1e-5
    std = data.x_train.std(0, unbiased=False)
    assert torch.all(((std - 1).abs() < 1e-4) | (std == 0))  # constant pixels are only centred
    again, other = load_dataset("digits"), load_dataset("digits", split_seed=1)
    assert torch.equal(again.x_val, data.x_val) and not torch.equal(other.y_val, data.y_val)
    cancer = load_dataset("breast_cancer")
    assert (cancer.n_train + cancer.n_val, cancer.n_features, cancer.n_classes) == (569, 30, 2)
    assert "load_breast_cancer" in cancer.source and "split_seed=0" in cancer.source


def test_the_synthetic_classification_task_is_seeded_and_recorded() -> None:
    data = load_dataset("classification")
    assert (data.n_train + data.n_val, data.n_features, data.n_classes) == (1500, 30, 4)
    assert torch.equal(load_dataset("classification").x_val, data.x_val)  # the same draw every time
    assert "make_classification(n_samples=1500" in data.source and "random_state=0" in data.source
    for label in range(4):  # stratified like the bundled sets
        n_val, n_train = int((data.y_val == label).sum()), int((data.y_train == label).sum())
        assert abs(n_val - (n_val + n_train) / 3) <= 1


def test_load_dataset_errors() -> None:
    with pytest.raises(ValueError, match="unknown data set 'iris'"):
        load_dataset("iris")
    with pytest.raises(ValueError, match="val_fraction"):
        load_dataset("digits", val_fraction=1.0)
    with pytest.raises(ValueError, match="max_examples"):
        load_dataset("digits", max_examples=1)


def test_funnel_shape() -> None:
    assert funnel_widths(1, 500, 10) == [500]
    assert funnel_widths(3, 100, 10) == [100, 70, 40]
    assert funnel_dropouts(4, 0.8) == pytest.approx([0.8, 0.6, 0.4, 0.2])
    hp = FunnelHyperparameters(batch_size=64, learning_rate=0.01, momentum=0.5, weight_decay=1e-3,
                               num_layers=3, max_units=100, max_dropout=0.6)
    model = build_funnel_mlp(hp, n_features=64, n_classes=10)
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 100), (100, 70), (70, 40), (40, 10)]
    assert [m.p for m in model if isinstance(m, torch.nn.Dropout)] == pytest.approx([0.6, 0.4, 0.2])


def test_hyperparameter_validation() -> None:
    values = SMALL.to_dict()
    assert FunnelHyperparameters.from_dict(values) == SMALL
    with pytest.raises(ValueError, match="outside its range"):
        FunnelHyperparameters.from_dict({**values, "learning_rate": 0.5})
    with pytest.raises(ValueError, match="outside its range"):
        FunnelHyperparameters.from_dict({**values, "num_layers": 6})
    with pytest.raises(ValueError, match="must be an integer"):
        FunnelHyperparameters.from_dict({**values, "batch_size": 20.5})
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        FunnelHyperparameters.from_dict({**values, "dropout": 0.1})
    with pytest.raises(ValueError, match="missing hyperparameter"):
        FunnelHyperparameters.from_dict({k: v for k, v in values.items() if k != "momentum"})
    with pytest.raises(ValueError, match="finite"):
        FunnelHyperparameters.from_dict({**values, "momentum": math.nan})


def test_sampling_is_seeded_prefix_stable_and_in_range() -> None:
    a = sample_settings(400, seed=0)
    assert a[:50] == sample_settings(50, seed=0) and sample_setting(0, 7) == a[7]
    assert sample_settings(50, seed=1) != a[:50]
    X = torch.tensor([hp.to_vector() for hp in a], dtype=torch.float64)
    U = to_unit_cube(X)
    assert ((U >= 0) & (U <= 1)).all()
    for j, (name, r) in enumerate(SEARCH_SPACE.items()):
        if r.integer:
            assert torch.equal(X[:, j], X[:, j].round()), name
            assert r.low <= X[:, j].min() and X[:, j].max() <= r.high, name
        # Uniform on the (log) scale: the unit-cube coordinate has mean ~1/2.
        assert abs(float(U[:, j].mean()) - 0.5) < 0.06, name
    assert to_unit_cube(torch.tensor([[16, 1e-4, 0.1, 1e-5, 1, 64, 0.0]], dtype=torch.float64)).abs().max() < 1e-12
    assert torch.allclose(to_unit_cube(torch.tensor([[512, 0.1, 0.99, 0.1, 5, 1024, 1.0]], dtype=torch.float64)),
                          torch.ones(1, 7, dtype=torch.float64))
    assert set(X[:, 4].tolist()) == {1, 2, 3, 4, 5}  # every layer count, ends included
    assert list(HPARAM_NAMES) == ["batch_size", "learning_rate", "momentum", "weight_decay",
                                  "num_layers", "max_units", "max_dropout"]


def test_train_is_deterministic_and_learns(small_data: TabularData) -> None:
    state = torch.get_rng_state()
    a = train(SMALL, small_data, epochs=8, seed=3)
    assert torch.equal(state, torch.get_rng_state())  # the caller's RNG is untouched
    b = train(SMALL, small_data, epochs=8, seed=3)
    c = train(SMALL, small_data, epochs=8, seed=4)
    assert a.val_error == b.val_error and a.val_loss == b.val_loss and a.val_loss != c.val_loss
    assert a.epochs_run == 8 and len(a.val_error) == len(a.val_loss) == 8 and not a.stopped_early
    assert a.val_error[-1] < min(0.7, a.val_error[0])  # well below chance (0.9) after 8 epochs
    seen: list[tuple[int, float, float]] = []
    stopped = train(SMALL, small_data, epochs=8, seed=3, callback=lambda e, l, r: seen.append((e, l, r)) or e == 3)
    assert stopped.epochs_run == 3 and stopped.stopped_early
    assert seen == list(zip([1, 2, 3], a.val_loss[:3], a.val_error[:3]))
    with pytest.raises(ValueError, match="epochs"):
        train(SMALL, small_data, epochs=0)


def test_cosine_schedule_depends_on_the_run_length(small_data: TabularData) -> None:
    # Same seed, so epoch 1 is identical; after it the 2-epoch run anneals faster.
    short, long = train(SMALL, small_data, epochs=2, seed=0), train(SMALL, small_data, epochs=20, seed=0)
    assert short.val_loss[0] == long.val_loss[0] and short.val_loss[1] != long.val_loss[1]


def test_diverged_run_is_recorded_as_error_one(small_data: TabularData) -> None:
    huge = dataclasses.replace(small_data, name="huge", x_train=small_data.x_train * 1e30,
                               x_val=small_data.x_val * 1e30, source="scaled")
    hp = FunnelHyperparameters(**{**SMALL.to_dict(), "learning_rate": 0.1, "momentum": 0.99})
    result = train(hp, huge, epochs=4, seed=0)
    assert result.epochs_run == 4
    assert result.val_error[-1] == 1.0 and result.val_loss[-1] == math.inf
    assert np.all(np.isfinite(result.val_error))
