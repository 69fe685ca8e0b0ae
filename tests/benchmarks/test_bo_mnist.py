"""The tabular BO benchmark: problems, baselines, harness accounting, analysis and CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr


from benchmarks import bo_mnist
from benchmarks.bo import analysis
from benchmarks.bo.baselines import ASHA, BASELINES, OneEpochTopK
from benchmarks.bo.harness import History, TabularProblem, simulate
from benchmarks.bo.problems import grid_bounds, mnist_table, synthetic_problem

CHEAP = ["random", "asha", "one_epoch"]


def hand_problem(first: list[float], checkpoints: tuple[int, ...] = (1, 2)) -> TabularProblem:
    """Curves whose error at epoch 1 is ``first`` and then stays flat."""
    error = (
        torch.tensor(first, dtype=torch.double).unsqueeze(-1).expand(-1, checkpoints[-1]).clone()
    )
    X = torch.linspace(0, 1, len(first), dtype=torch.double).unsqueeze(-1)
    return TabularProblem("hand", X, error, error.clone(), checkpoints)


def without_timing(trace: dict) -> dict:
    return {k: v for k, v in trace.items() if k not in ("suggest_seconds", "stop_seconds")}


@pytest.fixture(scope="module")
def small() -> TabularProblem:
    return synthetic_problem(n=60, seed=3)


@pytest.mark.parametrize("name", CHEAP)
@pytest.mark.parametrize("budget", [200, 5000])
def test_harness_accounting(small: TabularProblem, name: str, budget: int) -> None:
    trace = simulate(BASELINES[name](), small, seed=0, budget=budget)
    consumed = sum(t["epochs"] for t in trace.trials)
    assert consumed == budget or (
        len(trace.trials) == small.X.shape[0]
        and all(t["status"] != "running" for t in trace.trials)
    )
    completed = {t["setting"] for t in trace.trials if t["status"] == "completed"}
    finals = {float(small.final_error[s]) for s in completed}
    assert set(trace.incumbent_error) <= finals  # a stopped trial never becomes incumbent
    assert all(b <= a for a, b in zip(trace.incumbent_error, trace.incumbent_error[1:]))
    assert trace.epochs == sorted(trace.epochs) and trace.epochs[-1] <= budget


class InOrderASHA(ASHA):
    """ASHA that starts settings 0, 1, 2, ... so the test knows the order."""

    def suggest(self, history: History) -> int:
        return int(history.remaining()[0])


def test_asha_stops_exactly_outside_top_third() -> None:
    # eta = 3: continue iff fewer than ceil(n / 3) recorded errors are lower.
    first = [0.5, 0.6, 0.4, 0.7, 0.3, 0.45, 0.42]
    trace = simulate(InOrderASHA(eta=3), hand_problem(first), seed=0, budget=100, workers=1)
    statuses = [t["status"] for t in trace.trials]
    assert statuses == [
        "completed",
        "stopped",
        "completed",
        "stopped",
        "completed",
        "stopped",
        "completed",
    ]
    assert trace.incumbent_error == [0.5, 0.4, 0.3, 0.3]


def test_one_epoch_trains_true_top_k_per_round() -> None:
    generator = torch.Generator().manual_seed(0)
    first = torch.rand(25, generator=generator).tolist()
    problem = hand_problem(first, checkpoints=(1, 3))
    trace = simulate(OneEpochTopK(n_screen=10, top_k=2), problem, seed=1, budget=10_000)
    trials = trace.trials
    # rounds: trials 0-9, 10-19 and the last, partial one 20-24
    for lo, hi in [(0, 10), (10, 20), (20, 25)]:
        settings = [t["setting"] for t in trials[lo:hi]]
        top = sorted(settings, key=lambda s: first[s])[:2]
        full = [t["setting"] for t in trials[lo:hi] if t["status"] == "completed"]
        assert sorted(full) == sorted(top)
    assert all(t["epochs"] == 1 for t in trials if t["status"] == "stopped")
    assert sum(t["epochs"] for t in trials) == 25 + 6 * 2


@pytest.mark.parametrize("name", CHEAP)
def test_determinism(small: TabularProblem, name: str) -> None:
    runs = [
        without_timing(simulate(BASELINES[name](), small, seed, 300).to_json())
        for seed in (4, 4, 5)
    ]
    assert runs[0] == runs[1]
    assert runs[0]["trials"] != runs[2]["trials"]


def test_optuna_method(small: TabularProblem) -> None:
    pytest.importorskip("optuna")
    method = BASELINES["optuna_tpe_hyperband"]
    runs = [without_timing(simulate(method(), small, seed, 400).to_json()) for seed in (0, 0, 1)]
    assert runs[0] == runs[1] and runs[0]["trials"] != runs[2]["trials"]
    statuses = {t["status"] for t in runs[0]["trials"]}
    assert {"completed", "stopped"} <= statuses  # the Hyperband pruner stops some runs
    assert runs[0]["incumbent_error"]


def test_mnist_problem() -> None:
    problem = mnist_table()
    assert problem.X.shape == (2000, 6) and problem.error.shape == problem.loss.shape == (2000, 21)
    assert problem.X.min() == 0 and problem.X.max() == 1  # grid bounds are sampled in 2,000 draws
    assert 0 <= problem.error.min() and problem.error.max() <= 1 and (problem.loss > 0).all()
    assert 0.0 < problem.best_final_error < 0.1
    with pytest.raises(ValueError, match="checkpoints"):
        mnist_table(checkpoints=(1, 3, 20))
    with pytest.raises(ValueError, match="HPARAM_NAMES"):
        grid_bounds({"grid": {"dropout": [0, 1]}})


def test_synthetic_problem() -> None:
    a, b, c = (
        synthetic_problem(n=200, seed=1),
        synthetic_problem(n=200, seed=1),
        synthetic_problem(n=200, seed=2),
    )
    assert a.X.shape == (200, 4) and a.error.shape == (200, 21)
    assert torch.equal(a.error, b.error) and not torch.equal(a.error, c.error)
    assert 0 <= a.error.min() and a.error.max() <= 1 and ((a.X >= 0) & (a.X <= 1)).all()
    # curves cross: the epoch-1 ranking is a poor guide to the final ranking
    assert spearmanr(a.error[:, 0], a.error[:, -1]).statistic < 0.5
    # the noise-free final errors are the observed ones without the generator's noise
    residual = a.final_error - a.true_final_error
    assert not torch.equal(a.true_final_error, a.final_error)
    assert residual.std() == pytest.approx(0.005, rel=0.2) and residual.mean().abs() < 0.002
    with pytest.raises(ValueError, match="true_final_error"):
        TabularProblem("bad", a.X, a.error, a.loss, a.checkpoints, true_final_error=a.final_error[:3])
    with pytest.raises(ValueError):
        synthetic_problem(n=0)
    with pytest.raises(ValueError):
        synthetic_problem(d=1)


TRACE = {
    "seed": 0,
    "epochs": [21, 42, 60],
    "incumbent_error": [0.3, 0.2, 0.1],
    "incumbent_loss": [1.0, 0.8, 0.5],
    "suggest_seconds": [1.0, 2.0, 3.0],
    "suggest_observed": [100, 200, 300],
    "stop_seconds": [],
}


def test_regret_step_function_and_budgets() -> None:
    regret = analysis.regret_curve(TRACE, best=0.05, before=0.5, grid=[1, 20, 21, 41, 42, 100])
    np.testing.assert_allclose(regret, [0.5, 0.5, 0.25, 0.25, 0.15, 0.05])
    np.testing.assert_allclose(
        analysis.regret_at(TRACE, 0.05, 0.5, [10, 50, 1000], budget=50), [0.5, 0.15, 0.15]
    )
    empty = {**TRACE, "epochs": [], "incumbent_error": [], "incumbent_loss": []}
    np.testing.assert_allclose(analysis.regret_curve(empty, 0.05, 0.5, [1, 99]), [0.5, 0.5])
    assert math.isnan(analysis.final_loss(empty)) and analysis.final_loss(TRACE) == 0.5


def test_a_final_choice_is_judged_by_its_quality_ties_by_their_mean() -> None:
    error = np.array([[0.5, 0.3], [0.4, 0.2], [0.4, 0.2], [0.1, 0.1], [0.3, 0.25]])
    quality = np.array([0.3, 0.22, 0.26, 0.12, 0.05])  # setting 4 is truly best
    trace = {"trials": [
        {"setting": 0, "epochs": 2}, {"setting": 1, "epochs": 2}, {"setting": 2, "epochs": 2},
        {"setting": 3, "epochs": 1},  # lowest error, never completed: not a choice
    ]}
    # settings 1 and 2 tie on the final error that chooses: their mean quality counts
    assert analysis.chosen_quality_regret(trace, error, quality) == pytest.approx(0.24 - 0.05)
    assert analysis.chosen_quality_regret(trace, error, error[:, -1]) == pytest.approx(0.1)
    assert math.isnan(analysis.chosen_quality_regret({"trials": trace["trials"][3:]}, error, quality))


def test_budget_spending_tells_a_missed_promotion_from_a_missed_search() -> None:
    error = np.array([[0.5, 0.3, 0.05], [0.4, 0.2, 0.2], [0.3, 0.3, 0.3], [0.6, 0.4, 0.05]])
    trace = {"trials": [  # setting 0 (a best one) paused at epoch 1, resumed to 2
        {"setting": 0, "epochs": 1}, {"setting": 1, "epochs": 3}, {"setting": 0, "epochs": 2},
        {"setting": 2, "epochs": 1},
    ]}
    spent = analysis.budget_spending(trace, error)
    assert spent == {"tried": 3, "finished": 1, "best_epochs": 2, "top10_finished": 1}
    # the other best setting (3, tied) trained to the end counts as the best finished
    spent = analysis.budget_spending({"trials": [*trace["trials"], {"setting": 3, "epochs": 3}]}, error)
    assert spent["best_epochs"] == 3 and spent["finished"] == 2
    assert analysis.budget_spending({"trials": trace["trials"][1:2]}, error)["best_epochs"] == 0


def test_late_promotions_places_runs_by_their_standing_in_the_table() -> None:
    # 20 settings, checkpoints at epochs 1, 2, 3, 4: the late decisions are at epochs 2 and 3
    error = np.tile(np.linspace(0.1, 0.6, 20)[:, None], (1, 4))  # setting i ranks i-th everywhere
    trace = {"trials": [
        {"setting": 0, "epochs": 4},  # top 10 % at epochs 2 and 3: continued at both
        {"setting": 1, "epochs": 2},  # top 10 % at epoch 2, left there
        {"setting": 2, "epochs": 2},  # standing exactly 10 %: the next 15 %, left at epoch 2
        {"setting": 3, "epochs": 1}, {"setting": 3, "epochs": 3},  # next 15 %: resumed, continued once
        {"setting": 10, "epochs": 1},  # never reached a late checkpoint: not counted
        {"setting": 12, "epochs": 4},  # the rest: continued at both
    ]}
    counts = analysis.late_promotions(trace, error, [1, 2, 3, 4])
    assert counts.tolist() == [[2, 3], [1, 3], [2, 2]]
    with pytest.raises(ValueError, match="three checkpoints"):
        analysis.late_promotions(trace, error, [2, 4])


def test_epochs_to_threshold_and_overhead() -> None:
    assert analysis.epochs_to_threshold(TRACE, best=0.097) == 60
    assert analysis.epochs_to_threshold(TRACE, best=0.296) == 21
    assert math.isnan(analysis.epochs_to_threshold(TRACE, best=0.05))
    assert analysis.censored_epochs([TRACE, TRACE], best=0.097, budget=100) == (60.0, 2)
    assert analysis.censored_epochs([TRACE], best=0.05, budget=100) == (100.0, 0)
    cost = analysis.overhead(TRACE)
    assert (
        cost["suggest_at_200"] == 2.5 and cost["suggest_max"] == 3.0 and cost["suggest_mean"] == 2.0
    )
    assert math.isnan(cost["stop_mean"])
    mean, se = analysis.mean_se(np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_allclose(mean, [2, 3])
    np.testing.assert_allclose(se, [1, 1])


def test_wilcoxon_direction_and_targets() -> None:
    low, high = [0.01 * i for i in range(10)], [0.01 * i + 0.05 for i in range(10)]
    assert analysis.wilcoxon_less(low, high) < 0.01
    assert analysis.wilcoxon_less(high, low) > 0.99
    assert analysis.wilcoxon_less(low, low) == 1.0

    def run(seed: int, reach: int, final: float) -> dict:
        return {**TRACE, "seed": seed, "epochs": [reach, 2000], "incumbent_error": [final, final]}

    runs = {
        "gpar_es": [run(s, 100, 0.0) for s in range(8)],
        "ax_default": [run(s, 400, 0.001 * (s + 1)) for s in range(8)],
    }
    targets = analysis.check_targets(runs, best=0.0, before=0.5, budget=1000)
    assert [t["met"] for t in targets] == [True, True, True, True]  # ratio 0.25; p < 0.05; 2.5 s
    tests = analysis.comparisons(runs, 0.0, 0.5, 1000)
    assert [(t["other"], t["budget"]) for t in tests] == [("ax_default", 300), ("ax_default", 1000)]
    runs["gpar_es"] = [run(s, 900, 0.0) for s in range(8)]
    assert analysis.check_targets(runs, best=0.0, before=0.5, budget=1000)[0]["met"] is False


def test_quick_cli_writes_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = [
        "--quick",
        "--methods",
        *CHEAP,
        "--out",
        str(tmp_path),
        "--jobs",
        "1",
        "--no-surrogates",
    ]
    result = bo_mnist.main(argv)
    for suffix in ("md", "csv", "json", "png"):
        assert (tmp_path / f"bo_synthetic.{suffix}").stat().st_size > 0
    lines = (tmp_path / "bo_synthetic_runs.jsonl").read_text().splitlines()
    assert sorted((json.loads(x)["method"], json.loads(x)["seed"]) for x in lines) == sorted(
        (m, s) for m in CHEAP for s in range(2)
    )
    assert [r["method"] for r in result["rows"]] == CHEAP

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished run was recomputed")

    monkeypatch.setattr(bo_mnist, "simulate", fail)
    again = bo_mnist.main(argv)
    assert (tmp_path / "bo_synthetic_runs.jsonl").read_text().splitlines() == lines
    assert again["rows"] == result["rows"]


class ResumesRunning(InOrderASHA):
    """Asks to resume trial 0 while it is still running: a method bug."""

    def resume(self, history: History) -> int | None:
        return 0 if history.trials else None


class RecordsEpochsLeft(InOrderASHA):
    """ASHA that records what ``history.epochs_left()`` says at each start."""

    def reset(self, problem: TabularProblem, seed: int) -> None:
        super().reset(problem, seed)
        self.seen: list[tuple[int, float]] = []

    def resume(self, history: History) -> int | None:
        self.seen.append((history.consumed, history.epochs_left()))
        return None


def test_epochs_left_is_what_a_free_worker_can_still_train() -> None:
    method = RecordsEpochsLeft(eta=3)
    problem = hand_problem([0.5, 0.6, 0.4, 0.7, 0.3, 0.45], checkpoints=(1, 3))
    trace = simulate(method, problem, seed=0, budget=11, workers=2)
    assert method.seen[:2] == [(0, 5.5), (0, 5.5)]  # both workers start with the whole budget
    # Each trial started when at most e epochs were left trained at most e (rounded up:
    # workers take turns within a tick).
    starts = [left for _, left in method.seen]
    for trial, left in zip(trace.trials, starts):
        assert trial["epochs"] <= math.ceil(left)
    assert History(hand_problem([0.5])).epochs_left() is None  # no budget: nothing to tell


def test_harness_rejects_resuming_a_running_trial() -> None:
    with pytest.raises(RuntimeError, match="not stopped"):
        simulate(ResumesRunning(), hand_problem([0.1, 0.2, 0.3]), seed=0, budget=10, workers=2)


def test_surrogate_table_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"model": "last_value", "spearman": 0.5}, {"model": "gpar", "spearman": 0.7}]
    monkeypatch.setattr(bo_mnist, "surrogate_rows", lambda problem, seeds, quick: rows)
    bo_mnist.main(["--quick", "--methods", "random", "--out", str(tmp_path), "--jobs", "1"])
    assert "last_value" in (tmp_path / "bo_synthetic.md").read_text()
    assert json.loads((tmp_path / "bo_synthetic.json").read_text())["surrogates"] == rows
    assert (tmp_path / "bo_synthetic_surrogates.csv").read_text().splitlines()[
        0
    ] == "model,spearman"


@pytest.mark.slow  # CI's quick variant: test_quick_cli_writes_and_resumes and test_model_methods
def test_quick_mode_runs_every_method_and_the_surrogate_table(tmp_path: Path) -> None:
    """The smoke test of the whole benchmark: ``bo_mnist.py --quick``."""
    from benchmarks.bo.model_methods import MODEL_METHODS

    result = bo_mnist.main(["--quick", "--out", str(tmp_path)])
    methods = [r["method"] for r in result["rows"]]
    assert set(MODEL_METHODS) <= set(methods) and set(CHEAP) <= set(methods)
    runs = [json.loads(x) for x in (tmp_path / "bo_synthetic_runs.jsonl").read_text().splitlines()]
    assert len(runs) == 2 * len(methods)
    budget = bo_mnist.QUICK["budget"]
    for run in runs:  # every run spends its budget, and only completed trials are incumbents
        assert sum(t["epochs"] for t in run["trials"]) == budget
        assert all(e <= budget for e in run["epochs"])
    # The model-based methods got past their random start: they timed model suggestions.
    gpar = [r for r in runs if r["method"] == "gpar"]
    assert all(max(r["suggest_seconds"]) > 10 * min(r["suggest_seconds"]) for r in gpar)
    report = json.loads((tmp_path / "bo_synthetic.json").read_text())
    models = {row["model"] for row in report["surrogates"]}
    assert {"last_observed", "gpar", "freeze_thaw", "lkgp"} <= models


def test_spending_counts_stops_and_wrong_stops() -> None:
    final_error = [0.10, 0.09, 0.20, 0.30]
    trace = {
        "incumbent_error": [0.10],  # setting 1 (0.09) would have beaten it
        "trials": [
            {"setting": 0, "status": "completed", "epochs": 21},
            {"setting": 1, "status": "stopped", "epochs": 3},  # a wrong stop
            {"setting": 2, "status": "stopped", "epochs": 1},
            {"setting": 3, "status": "running", "epochs": 7},
        ]
    }
    other = {
        "incumbent_error": [0.2],
        "trials": [{"setting": 2, "status": "completed", "epochs": 21}],
    }
    (row,) = analysis.spending({"m": [trace, other]}, final_error)
    assert row["trials"] == 2.5 and row["completed"] == 1.0 and row["wrong_stops"] == 0.5
    assert row["stopped_share"] == pytest.approx((0.5 + 0.0) / 2)
    assert row["epochs_per_trial"] == pytest.approx((32 / 4 + 21) / 2)
