"""Pairing one method's runs in two runs files by seed."""

import json
from pathlib import Path

import pytest
from scipy.stats import wilcoxon

from benchmarks import freeze_thaw_compare as compare
from benchmarks.freeze_thaw_study import budget_of, make_problem


def _line(method: str, seed: int, final_regret: float, budget: int, best: float, rows: int,
          table: str = "quick", epochs: int | None = None) -> dict:
    """A run whose only completion, after ``epochs`` (default: the budget), has ``final_regret``."""
    trace = {"epochs": [budget if epochs is None else epochs], "incumbent_error": [best + final_regret]}
    return {"method": method, "table": table, "rows": rows, "seed": seed, "budget": budget, "trace": trace}


@pytest.fixture
def quick():
    problem = make_problem("quick")
    return budget_of("quick", problem), problem.best_final_error, problem.X.shape[0]


def test_pairs_seeds_both_files_hold_and_tests_both_ways(quick):
    budget, best, rows = quick
    old = [0.05, 0.04, 0.06, 0.03, 0.07, 0.08, 0.02]
    new = [0.01, 0.02, 0.00, 0.01, 0.03, 0.02, 0.01]
    before = [_line("gpar_freeze_thaw", s, r, budget, best, rows) for s, r in enumerate(old[:6])]
    after = [_line("gpar_freeze_thaw", s, r, budget, best, rows) for s, r in reversed(list(enumerate(new)))]
    # Not compared: seed 6 (only in `after`), another method, budget, row count or table.
    before += [_line("asha", 6, 0.0, budget, best, rows), _line("gpar_freeze_thaw", 6, 0.0, budget + 1, best, rows),
               _line("gpar_freeze_thaw", 6, 0.0, budget, best, rows + 1),
               _line("gpar_freeze_thaw", 6, 0.0, budget, best, rows, table="101")]

    table = compare.compare(before, after, ["quick"])
    assert [r["at"] for r in table] == ["25%", "50%", "100%"]
    full = table[-1]
    assert full["seeds"] == 6
    assert full["regret_before"] == pytest.approx(sum(old[:6]) / 6)
    assert full["regret_after"] == pytest.approx(sum(new[:6]) / 6)
    assert full["p_after_less"] == pytest.approx(wilcoxon(new[:6], old[:6], alternative="less").pvalue)
    assert full["p_before_less"] == pytest.approx(wilcoxon(old[:6], new[:6], alternative="less").pvalue)
    median = float(make_problem("quick").final_error.median()) - best
    assert table[0]["regret_before"] == table[0]["regret_after"] == pytest.approx(median)  # nothing done yet
    assert table[0]["p_after_less"] == 1.0  # every pair ties


def test_reads_mnist_at_300_epochs_and_other_budgets():
    problem = make_problem("mnist")
    best, rows = problem.best_final_error, problem.X.shape[0]
    budget = budget_of("mnist", problem)
    before = [_line("gpar_freeze_thaw", s, 0.01, budget, best, rows, "mnist", epochs=200) for s in range(3)]
    after = [_line("gpar_freeze_thaw", s, 0.02, budget, best, rows, "mnist", epochs=400) for s in range(3)]
    table = {r["at"]: r for r in compare.compare(before, after, ["mnist"])}
    assert list(table) == ["300ep", "25%", "50%", "100%"]
    assert table["300ep"]["regret_before"] == pytest.approx(0.01)  # done after 200 epochs
    assert table["300ep"]["regret_after"] == pytest.approx(float(problem.final_error.median()) - best)
    assert table["100%"]["regret_after"] == pytest.approx(0.02)

    short = budget_of("mnist", problem, 12)
    lines = [_line("gpar_freeze_thaw", 0, 0.03, short, best, rows, "mnist")]
    assert compare.compare(lines, lines, ["mnist"], budget_runs=12)[-1]["regret_after"] == pytest.approx(0.03)
    with pytest.raises(ValueError, match="no seed"):
        compare.compare(lines, lines, ["mnist"])  # the default budget holds none of them


def test_two_runs_of_a_seed_in_one_file_are_an_error(quick):
    budget, best, rows = quick
    once = [_line("gpar_freeze_thaw", 0, 0.01, budget, best, rows)]
    with pytest.raises(ValueError, match="after runs hold two runs of gpar_freeze_thaw on table 'quick', seed 0"):
        compare.compare(once, once + once, ["quick"])


def test_cli_prints_the_table_and_rejects_bad_input(tmp_path, quick, capsys):
    budget, best, rows = quick
    paths = []
    for name, regret in (("before", 0.05), ("after", 0.01)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(json.dumps(_line("gpar_freeze_thaw", s, regret, budget, best, rows))
                                  for s in range(3)) + "\n")
        paths.append(str(path))
    text = compare.main([*paths, "--tables", "quick"])
    assert text.splitlines()[0].startswith("| table | at | seeds | regret_before")
    assert "| quick | 100% | 3 | 0.05 | 0.01 |" in text

    with pytest.raises(SystemExit):
        compare.main([paths[0], str(tmp_path / "missing.jsonl"), "--tables", "quick"])
    assert "no runs file at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main([*paths, "--tables", "quick", "--method", "asha"])
    assert "no seed of asha on table 'quick'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main([*paths, "--tables", "no_such_table"])
    assert "unknown table 'no_such_table'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main([*paths, "--tables", "quick", "--budget-runs", "0"])
    assert "--budget-runs must be >= 1" in capsys.readouterr().err
    twice = tmp_path / "twice.jsonl"
    twice.write_text(Path(paths[0]).read_text() * 2)
    with pytest.raises(SystemExit):
        compare.main([str(twice), paths[1], "--tables", "quick"])
    assert "before runs hold two runs of gpar_freeze_thaw on table 'quick', seed 0" in capsys.readouterr().err


def test_cli_reads_runs_at_another_budget(tmp_path):
    problem = make_problem("mnist")
    budget = budget_of("mnist", problem, 3)
    path = tmp_path / "runs.jsonl"
    line = _line("gpar_freeze_thaw", 0, 0.04, budget, problem.best_final_error, problem.X.shape[0], "mnist")
    path.write_text(json.dumps(line) + "\n")
    text = compare.main([str(path), str(path), "--tables", "mnist", "--budget-runs", "3"])
    assert "| mnist | 100% | 1 | 0.04 | 0.04 |" in text
    with pytest.raises(SystemExit):  # at the default budget the file holds no run
        compare.main([str(path), str(path), "--tables", "mnist"])


def test_after_method_pairs_a_candidate_with_the_default_in_one_file(quick, tmp_path, capsys):
    budget, best, rows = quick
    lines = [_line("gpar_freeze_thaw", s, 0.04, budget, best, rows) for s in range(3)]
    lines += [_line("gpar_freeze_thaw_converged", s, 0.01 * s, budget, best, rows) for s in range(4)]
    full = compare.compare(lines, lines, ["quick"], after_method="gpar_freeze_thaw_converged")[-1]
    assert full["seeds"] == 3  # seed 3 has no default run
    assert full["regret_before"] == pytest.approx(0.04)
    assert full["regret_after"] == pytest.approx(0.01)
    assert compare.compare(lines, lines, ["quick"])[-1]["regret_after"] == pytest.approx(0.04)
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    printed = compare.main([str(path), str(path), "--tables", "quick", "--after-method", "gpar_freeze_thaw_converged"])
    assert "| quick | 100% | 3 | 0.04 | 0.01 |" in printed
    with pytest.raises(SystemExit):
        compare.main([str(path), str(path), "--tables", "quick", "--after-method", "gpar_freeze_thaw_point"])
    assert "gpar_freeze_thaw (before) and gpar_freeze_thaw_point (after)" in capsys.readouterr().err
