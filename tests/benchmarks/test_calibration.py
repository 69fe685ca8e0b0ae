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
    levels = json.loads(out.with_suffix(".json").read_text())["by_level"]
    assert sum(r["n"] for r in levels) == len(stopped)  # every stopped run has a checkpoint
    assert "## By the run's level" in out.with_suffix(".md").read_text()
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


def test_with_levels_recovers_the_split_and_refuses_a_changed_one() -> None:
    problem = synthetic_problem(n=300, seed=5)
    _, _, _, Y_test, final = calibration.split(problem, seed=2, n_train=40, n_test=60)
    record = {"table": "t", "seed": 2, "model": "m", "prefix": (~Y_test.isnan()).sum(-1).tolist()}
    tables = {"t": lambda: problem}
    (filled,) = calibration.with_levels([record], tables, 40, 60)
    assert filled["final"] == final.tolist() and "final" not in record
    assert (filled["M"], filled["n_train"], filled["n_test"]) == (len(problem.checkpoints), 40, 60)
    length = torch.tensor(record["prefix"])
    expected = [float(Y_test[i, k - 1]) if k else math.nan for i, k in enumerate(length.tolist())]
    assert torch.equal(torch.tensor(filled["last_error"]).nan_to_num(-1), torch.tensor(expected).nan_to_num(-1))
    assert (length == 0).any() and (length > 0).any()
    assert calibration.with_levels([record], {}, 40, 60) == []  # unknown table: left out
    assert calibration.with_levels([filled], {}, 40, 60) == [filled]  # recorded levels are kept
    _, Y, stopped, selected_final = calibration.split_selected(problem, 2, 50)
    selected = {**record, "split": "selected", "prefix": (~Y[stopped].isnan()).sum(-1).tolist()}
    (filled,) = calibration.with_levels([selected], tables, 50)
    assert filled["final"] == selected_final.tolist()
    assert filled["last_error"] == calibration.last_errors(Y[stopped]).tolist()
    for moved in ({**record, "seed": 3}, record):  # another seed; other sizes (below)
        with pytest.raises(ValueError, match="does not give"):
            calibration.with_levels([moved], tables, 40, 61 if moved is record else 60)


def _record(table: str, seed: int, model: str, prefix: list[int], level: list[float],
            covered: list[float], M: int = 4) -> dict:
    return {"table": table, "seed": seed, "model": model, "M": M, "prefix": prefix,
            "last_error": level, "coverage50": covered, "coverage95": [1.0] * len(prefix)}


def test_by_level_groups_runs_by_their_observed_level_within_each_table_and_step() -> None:
    nan = math.nan
    # Table a (M = 4): last-step runs at levels 1..6, earlier ones at 10, 20 and 30, and
    # one with no checkpoint; model y also has a second split whose runs have the same
    # levels, which leaves the cuts where they are.
    prefix = [3, 3, 3, 3, 3, 3, 1, 2, 2, 0]
    level = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 10.0, 20.0, 30.0, nan]
    records = [_record("a", 0, "x", prefix, level, [1, 1, 0, 1, 0, 0, 1, 0, 1, 1]),
               _record("a", 0, "y", prefix, level, [0] * 10),
               {**_record("a", 0, "y", prefix, level, [0] * 10), "split": "again"},
               # Table b (M = 3) has no last-step run and a tie on a cut: levels 1, 2, 2, 3.
               _record("b", 0, "x", [1, 1, 1, 1], [1.0, 2.0, 2.0, 3.0], [1, 0, 1, 0], M=3)]
    rows = {(r["table"], r["model"], r["step"], r["level"]): r for r in calibration.by_level(records)}
    low = rows[("a", "x", "last", "low")]
    assert (low["n"], low["coverage50"], low["level_range"]) == (2, 1.0, "1.0000-2.0000")
    assert rows[("a", "x", "last", "middle")]["coverage50"] == 0.5
    assert rows[("a", "x", "last", "high")]["coverage50"] == 0.0
    # The earlier step's terciles are its own (10, 20, 30), not the table's.
    assert [rows[("a", "x", "earlier", k)]["n"] for k in ("low", "middle", "high")] == [1, 1, 1]
    assert rows[("a", "x", "earlier", "middle")]["coverage50"] == 0.0
    # Model y's double records do not move the cuts: its groups mirror x's, twice as large.
    assert rows[("a", "y", "last", "low")]["n"] == 4
    assert rows[("a", "y", "last", "low")]["coverage50_se"] == 0.0
    assert not any(k[0] == "b" and k[2] == "last" for k in rows)
    # b: cuts at 2 and 2 (ties go up): 1 -> low, 2, 2 and 3 -> high.
    assert rows[("b", "x", "earlier", "low")]["n"] == 1
    assert ("b", "x", "earlier", "middle") not in rows
    assert rows[("b", "x", "earlier", "high")]["n"] == 3
    assert len(rows) == 6 + 6 + 2
    assert all(math.isnan(r["below95"]) for r in rows.values())  # not recorded here
    records[0]["below95"] = [1.0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    rows = {(r["table"], r["model"], r["step"], r["level"]): r for r in calibration.by_level(records)}
    assert rows[("a", "x", "last", "low")]["below95"] == 0.5
    assert rows[("a", "x", "last", "middle")]["below95"] == 0.0


def test_converged_variants_pass_their_fit_arguments_to_the_fit(monkeypatch) -> None:
    from benchmarks import calibration
    from benchmarks.bo.freeze_thaw import CONVERGED_FIT

    assert set(calibration.FIT_KWARGS) <= set(calibration.GPAR_VARIANTS)
    seen = []
    monkeypatch.setattr(calibration, "fit_gpytorch_mll", lambda mll, **kwargs: seen.append(kwargs))
    problem = calibration.TABLES["synthetic_101"]()
    X, Y, *_ = calibration.split(problem, 0, 10, 5)
    names = ("laplace", "laplace_converged", "lognormal_converged", "laplace_log", "laplace_log_converged")
    for name in names:
        calibration.fit_curve_model(X, Y, calibration.GPAR_VARIANTS[name](problem),
                                    calibration.FIT_KWARGS.get(name))
    assert seen == [{}, CONVERGED_FIT, CONVERGED_FIT, {}, CONVERGED_FIT]
    assert [calibration.GPAR_VARIANTS[name](problem).get("draw_scales", "raw") for name in names] == [
        "raw", "raw", "raw", "log", "log"]
