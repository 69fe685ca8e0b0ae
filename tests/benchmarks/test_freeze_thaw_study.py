"""The freeze-thaw study's quick variant: runs, resumes, reports what the traces say."""

import json
import math

import numpy as np
import pytest
import torch

from benchmarks import freeze_thaw_study as study
from benchmarks.bo.analysis import chosen_quality_regret, late_promotions


def test_quick_study_writes_report_resumes_and_matches_traces(tmp_path):
    study.main(["--quick", "--methods", "asha", "random", "--out", str(tmp_path)])
    runs = tmp_path / "freeze_thaw_runs.jsonl"
    lines = [json.loads(x) for x in runs.read_text().splitlines()]
    assert sorted((x["method"], x["seed"]) for x in lines) == [
        ("asha", 0), ("asha", 1), ("random", 0), ("random", 1)]
    for suffix in ("md", "csv", "json", "png"):
        assert (tmp_path / f"freeze_thaw.{suffix}").stat().st_size > 0

    study.main(["--quick", "--methods", "asha", "random", "--out", str(tmp_path)])
    assert len(runs.read_text().splitlines()) == 4  # resumed: nothing rerun

    problem = study.make_problem("quick")
    rows = json.loads((tmp_path / "freeze_thaw.json").read_text())["rows"]
    for method in ("asha", "random"):
        finals = [x["trace"]["incumbent_error"][-1] - problem.best_final_error
                  for x in lines if x["method"] == method]
        row = next(r for r in rows if r["method"] == method)
        assert row["regret@100%"] == pytest.approx(sum(finals) / len(finals))
    judged = json.loads((tmp_path / "freeze_thaw.json").read_text())["chosen_quality"]
    assert {(q["method"], q["measure"], q["seeds"]) for q in judged} == {
        ("asha", "noise-free final error", 2), ("random", "noise-free final error", 2)}
    truth = problem.true_final_error.numpy()
    for q in judged:  # each seed's choice by the noisy final error, judged by the truth
        mine = [chosen_quality_regret(x["trace"], problem.error.numpy(), truth)
                for x in lines if x["method"] == q["method"]]
        assert q["chosen_regret"] == pytest.approx(sum(mine) / len(mine))
    spending = json.loads((tmp_path / "freeze_thaw.json").read_text())["spending"]
    for row in spending:  # the report's means are the traces' own
        mine = [x["trace"] for x in lines if x["method"] == row["method"]]
        assert row["settings_tried"] == pytest.approx(
            np.mean([len({t["setting"] for t in trace["trials"]}) for trace in mine]))
        assert 0 <= row["best_finished"] <= row["best_started"] <= row["seeds"] == 2
        late = sum(late_promotions(trace, problem.error.numpy(), problem.checkpoints) for trace in mine)
        assert late[:, 1].sum() > 0  # some run reached a late checkpoint
        for (continued, reached), name in zip(late, ("top10%", "10-25%", "rest")):
            share = row[f"late_continued_{name}"]
            assert share == pytest.approx(continued / reached) if reached else math.isnan(share)


def test_chosen_quality_is_the_truth_where_known_else_the_last_epochs_mean() -> None:
    import dataclasses

    problem = study.make_problem("quick")
    quality, measure = study.chosen_quality(problem)
    assert measure == "noise-free final error" and (quality == problem.true_final_error.numpy()).all()
    quality, measure = study.chosen_quality(dataclasses.replace(problem, true_final_error=None))
    assert measure == f"mean error over the last {study.SMOOTHED_EPOCHS} epochs"
    assert quality == pytest.approx(problem.error[:, -study.SMOOTHED_EPOCHS:].mean(-1).numpy())
    # a seed without a completed run counts as the median setting's regret
    rows = study.quality_rows("quick", problem, {"random": [
        {"seed": 0, "trace": {"trials": [{"setting": 0, "epochs": 1}]}}]})
    truth = problem.true_final_error.numpy()
    assert rows[0]["chosen_regret"] == pytest.approx(float(np.median(truth) - truth.min()))


def test_unknown_table_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        study.main(["--tables", "cifar", "--out", str(tmp_path)])
    assert "unknown table 'cifar'" in capsys.readouterr().err
    assert not (tmp_path / "freeze_thaw_runs.jsonl").exists()


def test_a_second_process_on_the_same_runs_file_is_refused(tmp_path):
    from benchmarks.report import exclusive

    with exclusive(tmp_path / "freeze_thaw_runs.jsonl"):
        with pytest.raises(SystemExit, match="in use by another process writing freeze_thaw_runs.jsonl"):
            study.main(["--quick", "--methods", "random", "--out", str(tmp_path)])
    assert not (tmp_path / "freeze_thaw_runs.jsonl").exists()


def test_the_measured_policy_is_the_earlier_default_told_the_table_noise() -> None:
    import dataclasses

    from benchmarks.bo.freeze_thaw import GPARFreezeThawMeasured, GPARFreezeThawMeasuredStaged
    from benchmarks.bo.problems import synthetic_problem

    problem = synthetic_problem(n=20, seed=1)
    method = GPARFreezeThawMeasured()
    method.reset(problem, seed=0)
    given = method.policy.gpar_options["measurement_noise"]  # the policy keeps a copy
    assert type(given) is type(problem.measurement_noise) and given.settings() == problem.measurement_noise.settings()
    assert not method.policy.staged_refits  # as its recorded runs were made
    staged = GPARFreezeThawMeasuredStaged()  # staged refits, told the noise
    staged.reset(problem, seed=0)
    assert staged.policy.staged_refits and "measurement_noise" in staged.policy.gpar_options
    with pytest.raises(ValueError, match="records no measurement noise"):
        GPARFreezeThawMeasured().reset(dataclasses.replace(problem, measurement_noise=None), seed=0)


def test_the_full_refit_policy_is_the_package_policy_without_staged_refits_and_not_a_default() -> None:
    from benchmarks import freeze_thaw_study
    from benchmarks.bo.freeze_thaw import GPARFreezeThaw, GPARFreezeThawFullRefits
    from benchmarks.bo.problems import synthetic_problem

    default, method = GPARFreezeThaw(), GPARFreezeThawFullRefits()
    for m in (default, method):
        m.reset(synthetic_problem(n=20, seed=1), seed=0)
    assert default.policy.staged_refits and not method.policy.staged_refits
    assert method.name == "gpar_freeze_thaw_full_refits"
    defaults = freeze_thaw_study._available_methods()  # candidates run only when named
    assert freeze_thaw_study.REFERENCE in defaults
    assert not set(freeze_thaw_study.CANDIDATES) & set(defaults)
    from benchmarks.bo import freeze_thaw as adapters

    variants = {getattr(adapters, name).name for name in adapters.__all__} - {GPARFreezeThaw.name}
    assert variants == set(freeze_thaw_study.CANDIDATES)  # every variant runs only when named


def test_the_previous_noise_policy_is_the_package_policy_with_that_prior_and_not_a_default() -> None:
    from benchmarks import freeze_thaw_study
    from benchmarks.bo.freeze_thaw import GPARFreezeThawPrevious
    from benchmarks.bo.problems import synthetic_problem

    method = GPARFreezeThawPrevious()
    method.reset(synthetic_problem(n=20, seed=1), seed=0)
    options = method.policy.gpar_options
    assert options["noise_prior"] == "previous" and options["hyperparameter_draws"] > 0
    assert method.policy.staged_refits  # otherwise the policy of its time
    assert method.name in freeze_thaw_study.CANDIDATES


def test_the_log_draws_policy_is_a_candidate_drawing_in_log_scales() -> None:
    from benchmarks import freeze_thaw_study
    from benchmarks.bo.freeze_thaw import GPARFreezeThaw, GPARFreezeThawLogDraws
    from benchmarks.bo.problems import synthetic_problem

    method = GPARFreezeThawLogDraws()
    method.reset(synthetic_problem(n=20, seed=1), seed=0)
    assert method.policy.gpar_options["draw_scales"] == "log"
    assert method.name in freeze_thaw_study.CANDIDATES and method.name in freeze_thaw_study.HARNESS_METHODS
    default = GPARFreezeThaw()
    default.reset(synthetic_problem(n=20, seed=1), seed=0)
    assert default.policy.gpar_options.get("draw_scales", "raw") == "raw"


def test_the_converged_policy_fits_to_the_candidate_tolerances_and_is_not_a_default(monkeypatch) -> None:
    from benchmarks import freeze_thaw_study
    from benchmarks.bo.freeze_thaw import CONVERGED_FIT, GPARFreezeThawConverged
    from benchmarks.bo.problems import synthetic_problem
    import botorch.optim.core as core

    method = GPARFreezeThawConverged()
    problem = synthetic_problem(n=20, seed=1)
    method.reset(problem, seed=0)
    assert method.policy.fit_kwargs == CONVERGED_FIT and method.name in freeze_thaw_study.CANDIDATES
    seen = []

    class Seen(Exception):
        pass

    def recording(*args, **kwargs):  # the first L-BFGS-B run's options; no fit needed
        seen.append(kwargs.get("options", {}))
        raise Seen

    monkeypatch.setattr(core, "minimize_with_timeout", recording)
    Y = problem.error[:6, torch.tensor(problem.checkpoints) - 1]
    with pytest.raises(RuntimeError, match="Fitting the conditional"):
        method.policy.model(problem.X[:6], Y)
    wanted = CONVERGED_FIT["optimizer_kwargs"]["options"]
    assert len(seen) == 1 and {k: seen[0].get(k) for k in wanted} == wanted


def test_first_seed_runs_only_the_later_seeds_and_reports_them_all(tmp_path):
    study.main(["--quick", "--methods", "random", "--first-seed", "1", "--out", str(tmp_path)])
    lines = [json.loads(x) for x in (tmp_path / "freeze_thaw_runs.jsonl").read_text().splitlines()]
    assert [x["seed"] for x in lines] == [1]
    assert json.loads((tmp_path / "freeze_thaw.json").read_text())["seeds"] == [1]  # the seeds reported
    study.main(["--quick", "--methods", "random", "--out", str(tmp_path)])  # the rest, resumed
    lines = [json.loads(x) for x in (tmp_path / "freeze_thaw_runs.jsonl").read_text().splitlines()]
    assert sorted(x["seed"] for x in lines) == [0, 1]
    assert json.loads((tmp_path / "freeze_thaw.json").read_text())["seeds"] == [0, 1]
    with pytest.raises(SystemExit):
        study.main(["--quick", "--methods", "random", "--first-seed", "2", "--out", str(tmp_path)])


@pytest.mark.parametrize(("table", "canonical"), [
    ("101", "101"), ("0101", "101"), ("mnist", "mnist"), ("quick", "quick"), ("digits", "digits"),
    ("digits:10", "digits:10"), ("digits:010", "digits:10"), ("breast_cancer:10", "breast_cancer:10"),
    ("dev_mnist_study", "dev_mnist_study"), ("dev_classification", "dev_classification")])
def test_table_names_of_the_study(table, canonical):
    assert study.canonical_table(table) == canonical  # the name its runs are stored under


@pytest.mark.parametrize("table", ["cifar", "digits:", "digits:x", "breast_cancer:-1", "mnist:10", "digits:\u00b2",
                                   "dev_mnist_study:10", "dev_classification:10"])
def test_bad_table_names_are_one_line_errors(table):
    with pytest.raises(ValueError, match="unknown table"):
        study.make_problem(table)


@pytest.mark.parametrize("table", ["digits:0", "breast_cancer:100000"])
def test_a_bad_row_count_fails_before_any_run(table, tmp_path, capsys):
    with pytest.raises(SystemExit):
        study.main(["--tables", "101", table, "--methods", "random", "--out", str(tmp_path)])
    assert "ROWS must be 1.." in capsys.readouterr().err
    assert not (tmp_path / "freeze_thaw_runs.jsonl").exists()


def test_funnel_table_prefix_rows():
    if not study.FUNNEL_CSV["breast_cancer"].exists():
        pytest.skip("breast_cancer_funnel_curves.csv not generated")
    problem = study.make_problem("breast_cancer:10")
    assert problem.name == "funnel_breast_cancer" and problem.X.shape == (10, 7)
    assert problem.error.shape == problem.loss.shape == (10, 50)
    assert study.make_problem("breast_cancer").X.shape[0] == 1000


def test_the_development_mnist_table_is_the_study_set_under_its_own_name():
    problem = study.make_problem("dev_mnist_study")
    mnist = study.make_problem("mnist")
    assert problem.name == "dev_mnist_study" and problem.checkpoints == mnist.checkpoints
    assert problem.X.shape == (291, 6) and problem.error.shape == (291, 21)
    assert not torch.equal(problem.error, mnist.error[:291])  # other curves than the reported table's


def test_the_development_funnel_table_is_the_classification_task_under_its_own_name():
    problem = study.make_problem("dev_classification")
    digits = study.make_problem("digits")
    assert problem.name == "dev_classification" and problem.checkpoints == digits.checkpoints
    assert problem.X.shape == (1000, 7) and problem.error.shape == (1000, 50)
    assert problem.measurement_noise.num_examples == 500  # its validation set


def test_the_budget_is_a_number_of_full_runs_worth_of_epochs(tmp_path):
    problem = study.make_problem("quick")
    assert study.budget_of("101", study.make_problem("101"), 12) == 12 * 21
    assert study.budget_of("mnist", problem) == 1000  # benchmarks.bo_mnist's budget by default
    assert study.budget_of("quick", problem, 12) == 10 * problem.epochs  # the quick table keeps its own
    with pytest.raises(SystemExit):
        study.main(["--quick", "--budget-runs", "0", "--out", str(tmp_path)])


def test_method_traces_pick_the_methods_seeds_and_name_what_is_missing(tmp_path) -> None:
    import json

    from benchmarks.freeze_thaw_study import budget_of, make_problem, method_traces

    problems = {"quick": make_problem("quick")}
    budget = budget_of("quick", problems["quick"])
    lines = [{"table": "quick", "budget": budget, "method": m, "seed": s, "trace": {"seed": s, "by": m}}
             for m, s in (("a", 0), ("a", 1), ("b", 2))]
    lines.append({"table": "quick", "budget": budget + 1, "method": "b", "seed": 0, "trace": {}})
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert method_traces(path, problems, "a", 2) == {"quick": {0: {"seed": 0, "by": "a"}, 1: {"seed": 1, "by": "a"}}}
    with pytest.raises(ValueError, match=r"fewer than 3 runs of a on \['quick'\]"):
        method_traces(path, problems, "a", 3)
    with pytest.raises(ValueError, match="fewer than 1 runs of b"):  # seed 2 only, and another budget
        method_traces(path, problems, "b", 1)
