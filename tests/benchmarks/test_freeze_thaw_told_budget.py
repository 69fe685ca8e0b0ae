"""The policy told a smaller budget, paired with the field read off at that budget."""

import json
import math

import pytest
from scipy.stats import wilcoxon

from benchmarks import freeze_thaw_told_budget as told_budget
from benchmarks.freeze_thaw_study import budget_of, make_problem

POLICY = "gpar_freeze_thaw"


@pytest.fixture(scope="module")
def mnist():
    problem = make_problem("mnist")
    return problem, problem.best_final_error, problem.X.shape[0]


def _line(method: str, seed: int, budget: int, completions: list[tuple[int, float]], best: float, rows: int,
          started: tuple[int, ...] = (0,)) -> dict:
    """A run with ``(epochs, regret)`` incumbents after each completion that started the table's
    rows ``started``."""
    trace = {"epochs": [e for e, _ in completions], "incumbent_error": [best + r for _, r in completions],
             "trials": [{"setting": i, "status": "stopped", "epochs": 1} for i in started]}
    return {"method": method, "table": "mnist", "rows": rows, "seed": seed, "budget": budget, "trace": trace}


def test_smaller_budgets_are_the_epochs_of_the_study_readings():
    from benchmarks.freeze_thaw_study import report_points

    for table in ("101", "mnist", "digits:1000", "breast_cancer:1000"):
        points = report_points(table, budget_of(table, make_problem(table)))
        assert told_budget.smaller_budgets(table) == [("25%", points["25%"]), ("50%", points["50%"])]
    assert told_budget.smaller_budgets("101") == [("25%", 262), ("50%", 525)]  # round(262.5), as round(0.25 * 1050)
    assert told_budget.smaller_budgets("mnist") == [("25%", 250), ("50%", 500)]
    with pytest.raises(ValueError, match="table 'quick' keeps one budget"):
        told_budget.smaller_budgets("quick")


def test_pairs_told_runs_with_the_field_read_off_at_their_budget(mnist):
    problem, best, rows = mnist
    full, quarter, half = budget_of("mnist", problem), 250, 500
    told = [_line(POLICY, s, quarter, [(200, r)], best, rows) for s, r in enumerate([0.010, 0.012, 0.008, 0.011, 0.009])]
    told[0]["trace"] = {"epochs": [200, 250], "incumbent_error": [best + 0.5, best + 0.010]}  # done at the budget: counts
    told += [_line(POLICY, 20, quarter, [(10, 0.0)], best, rows)]  # seed 20: not below seeds=20
    told += [_line(POLICY, s, half, [(450, 0.004)], best, rows) for s in range(5)]
    # The field, run with the whole budget: ASHA's incumbents at 240 and 260 epochs (read at
    # 250: the first), random search's first completion after 250 (the median setting's
    # regret there), a seed the told runs lack (not paired) and a run of another budget.
    asha = [0.020, 0.015, 0.030, 0.025, 0.018]
    runs = [_line("asha", s, full, [(240, r), (260, 0.0)], best, rows) for s, r in enumerate(asha)]
    runs += [_line("random", s, full, [(300, 0.0)], best, rows) for s in range(6)]
    runs += [_line(POLICY, s, full, [(100, 0.03), (480, 0.001)], best, rows) for s in range(5)]
    runs += [_line("syne_dyhpo", 0, full + 1, [(10, 0.0)], best, rows)]
    runs += [_line("one_epoch", s, full, [(250, 0.001), (251, 0.0)], best, rows) for s in (*range(5), 20)]

    rows_out = told_budget.told_budget_rows(runs, told, ["mnist"], seeds=20)
    by = {(r["at"], r["method"]): r for r in rows_out}
    assert {m for _, m in by} == {told_budget.TOLD, POLICY, "asha", "random", "one_epoch"}  # DyHPO: other budget
    assert by["25%", "one_epoch"]["regret"] == pytest.approx(0.001)  # its completion at epoch 250 counts
    assert by["25%", "one_epoch"]["seeds"] == 5  # seed 20 is left out
    assert by["25%", told_budget.TOLD]["seeds"] == 5
    assert math.isnan(by["25%", told_budget.TOLD]["p_told_less"])  # not a comparison
    ours = [0.010, 0.012, 0.008, 0.011, 0.009]
    assert by["25%", "asha"]["regret"] == pytest.approx(sum(asha) / 5)
    assert by["25%", "asha"]["told_regret"] == pytest.approx(sum(ours) / 5)
    assert by["25%", "asha"]["p_told_less"] == pytest.approx(wilcoxon(ours, asha, alternative="less").pvalue)
    assert by["25%", "asha"]["p_other_less"] == pytest.approx(wilcoxon(asha, ours, alternative="less").pvalue)
    median = float(problem.final_error.median()) - best
    assert by["25%", "random"]["regret"] == pytest.approx(median)
    assert by["25%", "random"]["seeds"] == 5  # seed 5 has no told run
    assert by["25%", POLICY]["regret"] == pytest.approx(0.03)  # the full-budget policy read off at 250
    assert by["50%", POLICY]["regret"] == pytest.approx(0.001)
    assert by["50%", "asha"]["regret"] == 0.0  # ASHA's second incumbent, at 260, counts at 500
    assert by["50%", told_budget.TOLD]["regret"] == pytest.approx(0.004)

    verdict = {v["at"]: v for v in told_budget.verdicts(rows_out)}
    assert verdict["25%"]["told_vs_lowest"] == "higher" and verdict["25%"]["field_lowest"] == "one_epoch"
    assert verdict["50%"]["told_vs_lowest"] == "higher" and verdict["50%"]["field_lowest_regret"] == 0.0
    tie = [dict(r, regret=0.0) if r["method"] == told_budget.TOLD else r for r in rows_out if r["at"] == "50%"]
    assert told_budget.verdicts(tie)[0]["told_vs_lowest"] == "tied"
    ahead = [dict(r, regret=-1.0) if r["method"] == told_budget.TOLD else r for r in rows_out if r["at"] == "50%"]
    assert told_budget.verdicts(ahead)[0]["told_vs_lowest"] == "lower"
    assert verdict["25%"]["read_off_regret"] == pytest.approx(0.03)
    # The told policy is lower than ASHA on all five seeds (p 1/32) and than random search
    # (the median setting's regret), higher than one-epoch screening.
    assert verdict["25%"]["field_beaten_p05"] == "2/3"
    assert verdict["25%"]["field_without_runs"] == "optuna_tpe_hyperband syne_bohb syne_hypertune syne_mobster syne_dyhpo"


def test_missing_runs_and_duplicate_seeds_are_errors(mnist):
    _, best, rows = mnist
    quarter = [_line(POLICY, 0, 250, [(200, 0.01)], best, rows)]
    half = [_line(POLICY, 0, 500, [(200, 0.01)], best, rows)]
    field = [_line("asha", 0, 1000, [(100, 0.02)], best, rows)]
    with pytest.raises(ValueError, match="no run of gpar_freeze_thaw told a budget of 500 epochs"):
        told_budget.told_budget_rows(field, quarter, ["mnist"])
    with pytest.raises(ValueError, match="told runs hold two runs of gpar_freeze_thaw on table 'mnist', seed 0"):
        told_budget.told_budget_rows(field, quarter + quarter + half, ["mnist"])
    with pytest.raises(ValueError, match="no method of the field has a run of the full budget"):
        told_budget.told_budget_rows([_line(POLICY, 0, 1000, [(100, 0.02)], best, rows)], quarter + half, ["mnist"])


def test_cli_writes_the_report_and_rejects_bad_input(tmp_path, mnist, capsys):
    _, best, rows = mnist
    told = tmp_path / "told.jsonl"
    told.write_text("".join(json.dumps(_line(POLICY, s, b, [(100, 0.01 * (s + 1))], best, rows)) + "\n"
                            for s in range(3) for b in (250, 500)))
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(_line("asha", s, 1000, [(100, 0.02)], best, rows)) + "\n" for s in range(3)))
    out = tmp_path / "out"
    text = told_budget.main(["--tables", "mnist", "--told", str(told), "--runs", str(runs), "--out", str(out)])
    assert "## Verdicts" in text and "- seeds: [0, 1, 2]" in text  # the seeds compared, not range(--seeds)
    assert {p.name for p in out.iterdir()} == {f"told_budget.{s}" for s in ("md", "csv", "json", "png")}
    with pytest.raises(SystemExit):
        told_budget.main(["--tables", "mnist", "--told", str(tmp_path / "none.jsonl"), "--runs", str(runs)])
    assert "no runs file at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        told_budget.main(["--tables", "nope", "--told", str(told), "--runs", str(runs)])
    assert "unknown table 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        told_budget.main(["--tables", "quick", "--told", str(told), "--runs", str(runs)])
    assert "keeps one budget" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        told_budget.main(["--tables", "mnist", "--told", str(tmp_path), "--runs", str(runs)])  # a folder
    assert "no runs file at" in capsys.readouterr().err


def test_started_and_finished_summarise_what_told_runs_had_and_finished(mnist):
    problem, best, rows = mnist
    regret = problem.final_error.numpy() - best
    order = [int(i) for i in regret.argsort()]
    seed0 = _line(POLICY, 0, 250, [], best, rows, started=(order[-1], order[3], order[5], order[9]))
    for t in seed0["trace"]["trials"][2:]:
        t["status"] = "completed"  # it finished the 6th and 10th best settings, not the 4th
    told = [seed0, _line(POLICY, 1, 250, [], best, rows, started=(order[0],)),
            _line(POLICY, 0, 500, [], best, rows, started=(order[-1],))]
    found = told_budget.started_and_finished(told, ["mnist"])
    assert found["mnist", "25%"]["told_best_started"] == pytest.approx((regret[order[3]] + 0.0) / 2)
    assert found["mnist", "25%"]["told_finished"] == 1.0  # two runs on seed 0, none on seed 1
    assert found["mnist", "25%"]["told_finished_median"] == pytest.approx((regret[order[5]] + regret[order[9]]) / 2)
    assert found["mnist", "50%"]["told_best_started"] == pytest.approx(regret[order[-1]])
    assert found["mnist", "50%"]["told_finished"] == 0.0
