"""The funnel-MLP table as a tabular BO problem, and the curve-crossing statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.bo.problems import FUNNEL_CHECKPOINTS, FUNNEL_CSV, funnel_table
from benchmarks.curve_crossing import (
    CHANCE, changes_against_binomial, chance_error, crossing_stats, finals_by_first_error, majority_error,
)
from gpar_bo.problems.funnel_mlp import generate_curves, load_dataset, sample_settings, to_unit_cube


def test_funnel_table_from_a_tiny_generation(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    generate_curves(path, 3, seed=0, data=load_dataset("breast_cancer", max_examples=60), epochs=50,
                    progress=False)
    problem = funnel_table("tiny", path=path, checkpoints=(10, 50))
    assert problem.name == "funnel_tiny" and problem.checkpoints == (10, 50)
    assert problem.X.shape == (3, 7) and problem.error.shape == problem.loss.shape == (3, 50)
    raw = torch.tensor([hp.to_vector() for hp in sample_settings(3, 0)], dtype=torch.float64)
    assert torch.allclose(problem.X, to_unit_cube(raw))
    assert torch.allclose(problem.X[:, 0], (raw[:, 0].log() - torch.log(torch.tensor(16.0))) / torch.log(torch.tensor(32.0)))
    with pytest.raises(ValueError, match="checkpoints"):
        funnel_table("tiny", path=path, checkpoints=(1, 49))
    with pytest.raises(ValueError, match="no funnel table for 'iris'"):
        funnel_table("iris")


@pytest.mark.parametrize("dataset", sorted(FUNNEL_CSV))
def test_committed_funnel_table(dataset: str) -> None:
    if not FUNNEL_CSV[dataset].exists():
        pytest.skip(f"{FUNNEL_CSV[dataset].name} not generated")
    problem = funnel_table(dataset)
    metadata = json.loads(FUNNEL_CSV[dataset].with_suffix(".json").read_text())
    n = metadata["rows"]
    assert metadata["dataset"] == dataset and problem.name == f"funnel_{dataset}"
    assert problem.X.shape == (n, 7) and problem.error.shape == (n, 50)
    assert problem.checkpoints == FUNNEL_CHECKPOINTS
    assert ((problem.X >= 0) & (problem.X <= 1)).all()
    assert 0 <= problem.error.min() and problem.error.max() <= 1 and (problem.loss > 0).all()
    assert 0.0 < problem.best_final_error < 0.1
    # the recorded validation size is the split's, so the binomial noise is the right one
    assert problem.measurement_noise.num_examples == len(load_dataset(dataset).y_val) == metadata["n_val"]


def test_majority_error_is_the_minority_share_of_a_binary_validation_set() -> None:
    share = float(load_dataset("breast_cancer").y_val.double().mean())  # of class 1
    assert majority_error("breast_cancer") == pytest.approx(min(share, 1 - share))
    assert majority_error("digits") > CHANCE  # ten balanced classes
    # chance is the majority-class error on a binary task, the margin below it on digits
    assert chance_error("breast_cancer") == majority_error("breast_cancer")
    assert chance_error("digits") == CHANCE


def test_finals_by_first_error() -> None:
    # Ten settings with epoch-1 errors 0..0.9 and finals 1..10: the 60 % quantile of the
    # epoch-1 error is 0.54 and the 80 % one 0.72, so the bands hold settings 6-7 and 8-9.
    first = torch.arange(10, dtype=torch.float64) / 10
    error = torch.stack([first, torch.arange(1, 11, dtype=torch.float64)], dim=-1)
    middle, worst = finals_by_first_error(error)
    assert (middle["first_low"], middle["first_high"], middle["share"]) == (0.6, 0.7, 0.2)
    assert (worst["first_low"], worst["first_high"], worst["share"]) == (0.8, 0.9, 0.2)
    assert middle["final_q50"] == pytest.approx(7.5) and worst["final_q05"] == pytest.approx(9.05)
    # settings tied at an edge go to the band above it, which then holds more than its share
    tied = error.clone()
    tied[5:, 0] = 0.5
    (band,) = finals_by_first_error(tied)
    assert band["share"] == 0.5 and band["final_q50"] == pytest.approx(8)
    with pytest.raises(ValueError, match="edges must increase"):
        finals_by_first_error(error, edges=(0.8, 0.6))
    with pytest.raises(ValueError, match="non-finite"):
        finals_by_first_error(torch.tensor([[0.5, float("nan")]], dtype=torch.float64))
    with pytest.raises(ValueError, match="n x E"):
        finals_by_first_error(error[:, 0])


def test_crossing_stats() -> None:
    # Three settings: a/b swap order between epoch 1 and the end, c is worst throughout.
    error = torch.tensor([[0.5, 0.1], [0.4, 0.2], [0.9, 0.9]], dtype=torch.float64)
    stats = crossing_stats(error)
    assert stats["settings"] == 3 and stats["crossing_fraction"] == pytest.approx(1 / 3)
    assert stats["spearman_first_final"] == pytest.approx(0.5)
    assert stats["best_final"] == 0.1 and stats["median_final"] == 0.2
    assert stats["tied_pair_fraction"] == 0 and stats["best_half_crossing_fraction"] == 1.0
    tied = crossing_stats(torch.tensor([[0.9, 0.9], [0.9, 0.9], [0.5, 0.1]], dtype=torch.float64))
    assert tied["tied_pair_fraction"] == pytest.approx(1 / 3) and tied["crossing_fraction"] == 0
    assert crossing_stats(error, chance=0.5)["chance_or_worse_final_fraction"] == pytest.approx(1 / 3)
    assert crossing_stats(error, chance=0.95)["chance_or_worse_final_fraction"] == 0
    # an error stored to 9 digits that equals chance counts, whichever way it was rounded
    at_chance = torch.tensor([[0.5, round(71 / 190, 9) - 1e-9]], dtype=torch.float64)
    assert crossing_stats(at_chance, chance=71 / 190)["chance_or_worse_final_fraction"] == 1


def test_changes_against_binomial() -> None:
    generator = torch.Generator().manual_seed(0)
    n, epochs, examples = 4000, 6, 500
    # Every epoch an independent measurement of an error rate of 0.2: the ratio is near 1.
    independent = torch.binomial(torch.full((n, epochs), float(examples)),
                                 torch.full((n, epochs), 0.2), generator=generator) / examples
    steps = changes_against_binomial(independent, examples, share=1.0)
    assert [(s["from_epoch"], s["to_epoch"]) for s in steps] == [(3, 4), (5, 6)]
    for step in steps:
        assert step["sd_independent"] == pytest.approx((2 * 0.2 * 0.8 / examples) ** 0.5, rel=0.02)
        assert step["ratio"] == pytest.approx(1.0, abs=0.05)
    # One measurement shared by every epoch (a fixed validation set, a converged run): no change.
    shared = independent[:, :1].expand(n, epochs)
    assert all(s["sd_change"] == 0 and s["ratio"] == 0 for s in changes_against_binomial(shared, examples))
    # The best quarter by final error is compared: adding a constant to the worse runs changes nothing.
    worse = independent[:, -1] > torch.quantile(independent[:, -1], 0.25)
    shifted = torch.where(worse.unsqueeze(-1), independent + 0.3 * torch.arange(epochs), independent)
    assert changes_against_binomial(shifted, examples) == changes_against_binomial(independent, examples)
    with pytest.raises(ValueError, match="E >= 2"):
        changes_against_binomial(independent[:, :1], examples)
    with pytest.raises(ValueError, match="num_examples"):
        changes_against_binomial(independent, 0)
    with pytest.raises(ValueError, match="share"):
        changes_against_binomial(independent, examples, share=0.0)
