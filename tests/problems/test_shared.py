"""What the problems share: the hyperparameter base, the data split and the generator CLI."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

from gpar_bo.problems.funnel_mlp import FunnelHyperparameters
from gpar_bo.problems.generate_cli import add_generator_parser, canonical_command
from gpar_bo.problems.mnist import MLPHyperparameters
from gpar_bo.problems.splits import ClassificationSplit, check_split_arguments

FUNNEL = dict(batch_size=64, learning_rate=0.01, momentum=0.9, weight_decay=1e-4, num_layers=2,
              max_units=128, max_dropout=0.25)


def test_hyperparameters_round_trip_and_reject_non_numbers() -> None:
    hp = FunnelHyperparameters.from_dict(FUNNEL)
    assert FunnelHyperparameters.names() == tuple(FUNNEL)
    assert FunnelHyperparameters.from_vector(torch.tensor(hp.to_vector(), dtype=torch.float64)) == hp
    assert isinstance(hp.num_layers, int) and hp.to_dict() == FUNNEL
    with pytest.raises(ValueError, match="expected 7 values, got 6"):
        FunnelHyperparameters.from_vector(hp.to_vector()[:6])
    with pytest.raises(ValueError, match="momentum must be a number, got True"):
        FunnelHyperparameters(**{**FUNNEL, "momentum": True})
    with pytest.raises(ValueError, match="dropout must be finite"):
        MLPHyperparameters(n_hidden_layers=1, n_neurons=50, dropout=float("nan"),
                           log_learning_rate=-5.0, log_l1=-10.0, log_l2=-10.0)
    with pytest.raises(ValueError, match="num_layers must be an integer, got 2.5"):
        FunnelHyperparameters(**{**FUNNEL, "num_layers": 2.5})


def test_split_from_indices_cuts_contiguous_tensors() -> None:
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int64)
    split = ClassificationSplit.from_indices(x, y, [5, 0, 3], np.array([1, 4]), "test")
    assert (split.n_train, split.n_val, split.n_features) == (3, 2, 2)
    assert torch.equal(split.x_train, torch.tensor([[10.0, 11.0], [0.0, 1.0], [6.0, 7.0]]))
    assert split.y_val.tolist() == [1, 1] and split.x_val.is_contiguous()
    check_split_arguments(0.5, None)
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\), got 1.0"):
        check_split_arguments(1.0, 10)
    with pytest.raises(ValueError, match="max_examples must be at least 2, got 1"):
        check_split_arguments(0.5, 1)


def test_generator_parser_and_its_recorded_command() -> None:
    parser = argparse.ArgumentParser()
    sub = add_generator_parser(parser.add_subparsers(), "generate-x", help="h", description="d",
                               epochs=7, run=lambda args: 0)
    sub.add_argument("--layers", type=int, nargs="+", default=[1, 2])
    sub.add_argument("--data-dir", default=None)
    args = parser.parse_args(["generate-x", "--out", "a b.csv", "--n-settings", "3"])
    assert args.epochs == 7 and args.threads == 1 and args.max_new is None and args.run(args) == 0
    command = canonical_command("generate-x", args, ("out", "n_settings", "layers", "data_dir"))
    assert command == "gpar-bo generate-x --out 'a b.csv' --n-settings 3 --layers 1 2"
    with pytest.raises(SystemExit):
        parser.parse_args(["generate-x", "--out", "c.csv", "--n-settings", "0"])
