"""The calibration benchmark: its split, its mixture metrics and a quick run."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from benchmarks import calibration
from benchmarks.bo.problems import synthetic_problem


def test_split_is_closed_downwards_disjoint_and_deterministic() -> None:
    problem = synthetic_problem(n=120, seed=5)
    X, Y, X_test, Y_test, final = calibration.split(problem, seed=3, n_train=40, n_test=60)
    again = calibration.split(problem, seed=3, n_train=40, n_test=60)
    assert all(torch.equal(a.nan_to_num(-1), b.nan_to_num(-1)) for a, b in zip((X, Y, X_test, Y_test), again))
    for values in (Y, Y_test):
        seen = ~values.isnan()
        assert not (seen[:, 1:] & ~seen[:, :-1]).any()
    assert (~Y[:, -1].isnan()).sum() >= 2 and not (~Y_test[:, -1].isnan()).any()
    assert not (X.unsqueeze(1) == X_test.unsqueeze(0)).all(-1).any()
    rows = (X_test.unsqueeze(1) == problem.X).all(-1).int().argmax(-1)  # each test run's table row
    table = problem.error[rows][:, [c - 1 for c in problem.checkpoints]]
    assert torch.equal(final, table[:, -1])
    assert torch.equal(Y_test.nan_to_num(-1), torch.where(Y_test.isnan(), -1.0, table))
    with pytest.raises(ValueError, match="asked for"):
        calibration.split(problem, seed=0, n_train=100, n_test=60)


def test_mixture_metrics_of_one_gaussian_are_its_closed_forms() -> None:
    mean = torch.zeros(1, 4, dtype=torch.double)
    variance = torch.full((1, 4), 4.0, dtype=torch.double)
    # z = 0.5, 1.0, 2.0, 3.0 standard deviations from the mean
    target = torch.tensor([1.0, 2.0, 4.0, 6.0], dtype=torch.double)
    metrics = calibration.mixture_metrics(mean, variance, target)
    assert metrics["coverage50"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert metrics["coverage95"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert calibration.mixture_metrics(mean, variance, -target)["below95"].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert metrics["below95"].tolist() == [0.0, 0.0, 0.0, 0.0]  # above, not below
    expected = 0.5 * math.log(2 * math.pi * 4.0) + (target / 2) ** 2 / 2
    assert torch.allclose(metrics["nll"], expected)
    # A mixture of two identical components is the same Gaussian.
    twice = calibration.mixture_metrics(mean.expand(2, -1), variance.expand(2, -1), target)
    assert all(torch.allclose(twice[k], metrics[k]) for k in metrics)


def test_selected_split_continues_the_best_share_at_each_checkpoint() -> None:
    problem = synthetic_problem(n=120, seed=5)
    X, Y, stopped, final = calibration.split_selected(problem, seed=3, n_runs=50, keep=0.6)
    again = calibration.split_selected(problem, seed=3, n_runs=50, keep=0.6)
    assert all(torch.equal(a.nan_to_num(-1), b.nan_to_num(-1)) for a, b in zip((X, Y, stopped, final), again))
    length = (~Y.isnan()).sum(-1)
    M = Y.shape[-1]
    assert (length >= 1).all() and not ((~Y[:, 1:].isnan()) & Y[:, :-1].isnan()).any()
    for k in range(1, M):  # of the runs at checkpoint k, the best ceil(0.6 n) went on
        there = length >= k
        went_on = length >= k + 1
        assert int(went_on.sum()) == math.ceil(0.6 * int(there.sum()))
        assert Y[went_on, k - 1].max() <= Y[there & ~went_on, k - 1].min()
    assert torch.equal(stopped, (length < M).nonzero().squeeze(-1))
    rows = (X[stopped].unsqueeze(1) == problem.X).all(-1).int().argmax(-1)
    assert torch.equal(final, problem.error[rows, -1])
    with pytest.raises(ValueError, match="keep"):
        calibration.split_selected(problem, seed=0, n_runs=50, keep=1.0)
    with pytest.raises(ValueError, match="fewer than two"):  # 50 -> 5 -> 1: one run finishes
        calibration.split_selected(problem, seed=0, n_runs=50, keep=0.1)


def test_quick_selected_split_predicts_the_stopped_runs(tmp_path: Path) -> None:
    out = tmp_path / "selected"
    calibration.main(["--quick", "--split", "selected", "--models", "lognormal", "--out", str(out)])
    records = [json.loads(x) for x in out.with_name("selected_records.jsonl").read_text().splitlines()]
    assert [(r["split"], r["model"]) for r in records] == [("selected", "lognormal")]
    problem = synthetic_problem(n=300, seed=101)
    _, Y, stopped, _ = calibration.split_selected(problem, 0, 60)
    assert records[0]["prefix"] == (~Y[stopped].isnan()).sum(-1).tolist()
    assert len(records[0]["below95"]) == len(stopped)
    assert "**selected split**: 60 runs" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):  # no mixture of the reference model for stopped runs
        calibration.main(["--quick", "--split", "selected", "--models", "exp_decay", "--out", str(out)])


@pytest.mark.slow  # left out of CI for time (docs/testing.md)
def test_quick_run_writes_every_result_file_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "calibration"
    calibration.main(["--quick", "--models", "lognormal", "--out", str(out)])
    for suffix in (".md", ".csv", ".json", ".png"):
        assert out.with_suffix(suffix).exists()
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    overall = next(r for r in rows if r["prefix"] == "all")
    assert overall["model"] == "lognormal" and overall["n"] == 60
    assert sum(r["n"] for r in rows if r["prefix"] != "all") == 60
    assert 0 <= overall["coverage50"] <= overall["coverage95"] <= 1
    records = out.with_name("calibration_records.jsonl").read_text().splitlines()
    calibration.main(["--quick", "--models", "lognormal", "--out", str(out)])  # nothing left to do
    assert out.with_name("calibration_records.jsonl").read_text().splitlines() == records
    # --report rewrites the results from the records alone, even for a model never fitted.
    calibration.main(["--quick", "--report", "--models", "lognormal", "gamma", "--out", str(out)])
    assert out.with_name("calibration_records.jsonl").read_text().splitlines() == records
    assert json.loads(out.with_suffix(".json").read_text())["rows"] == rows


def test_tables_carry_their_measurement_noise_and_measured_needs_it() -> None:
    from benchmarks.bo.problems import mnist_table, synthetic_problem
    from gpar_bo.measurement import BinomialNoise, GaussianNoise

    mnist = mnist_table()
    assert isinstance(mnist.measurement_noise, BinomialNoise) and mnist.measurement_noise.num_examples == 833
    synthetic = synthetic_problem(n=20, seed=1, noise_std=0.01)
    assert isinstance(synthetic.measurement_noise, GaussianNoise) and synthetic.measurement_noise.std == 0.01
    assert calibration.GPAR_VARIANTS["measured"](synthetic)["measurement_noise"] is synthetic.measurement_noise
    silent = dataclasses.replace(synthetic, measurement_noise=None)
    with pytest.raises(ValueError, match="records no measurement noise"):
        calibration.GPAR_VARIANTS["measured"](silent)


def test_with_finals_recovers_the_split_and_refuses_a_changed_one() -> None:
    problem = synthetic_problem(n=300, seed=5)
    _, _, _, Y_test, final = calibration.split(problem, seed=2, n_train=40, n_test=60)
    record = {"table": "t", "seed": 2, "model": "m", "prefix": (~Y_test.isnan()).sum(-1).tolist()}
    tables = {"t": lambda: problem}
    (filled,) = calibration.with_finals([record], tables, 40, 60)
    assert filled["final"] == final.tolist() and "final" not in record
    assert calibration.with_finals([record], {}, 40, 60) == []  # unknown table: left out
    kept = {**record, "final": [0.5] * 60}
    assert calibration.with_finals([kept], {}, 40, 60) == [kept]  # recorded finals are kept
    _, Y, stopped, selected_final = calibration.split_selected(problem, 2, 50)
    selected = {**record, "split": "selected", "prefix": (~Y[stopped].isnan()).sum(-1).tolist()}
    assert calibration.with_finals([selected], tables, 50)[0]["final"] == selected_final.tolist()
    moved = {**record, "seed": 3}
    with pytest.raises(ValueError, match="no longer gives"):
        calibration.with_finals([moved], tables, 40, 60)


def test_by_level_pools_coverage_by_final_error_tercile_and_step() -> None:
    # Six runs per seed, two seeds; the finals 1..6 cut into terciles {1, 2}, {3, 4}, {5, 6}.
    def record(seed: int, model: str, covered: list[float]) -> dict:
        return {"table": "t", "seed": seed, "model": model, "prefix": [2, 2, 2, 0, 1, 0],
                "final": [1.0, 3.0, 5.0, 2.0, 4.0, 6.0], "coverage50": covered, "coverage95": [1.0] * 6}

    records = [record(0, "a", [1, 0, 0, 1, 1, 1]), record(1, "a", [1, 1, 0, 0, 1, 1]),
               record(0, "b", [0] * 6)]
    rows = {(r["model"], r["step"], r["final_error"]): r for r in calibration.by_level(records)}
    assert rows[("a", "last", "low")]["n"] == 2 and rows[("a", "last", "low")]["coverage50"] == 1.0
    assert rows[("a", "last", "middle")]["coverage50"] == 0.5
    assert rows[("a", "last", "high")]["coverage50"] == 0.0
    assert rows[("a", "earlier", "low")]["coverage50"] == 0.5
    assert rows[("a", "earlier", "high")]["final_error_range"] == "6.0000-6.0000"
    assert rows[("b", "earlier", "middle")] == {**rows[("b", "earlier", "middle")], "n": 1, "coverage50": 0.0}
    assert len(rows) == 12
